//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Enabled says whether this build has failpoints.
const Enabled = true

var (
	armed, nth = parse(os.Getenv(Env))
	hits       atomic.Int64
)

// parse reads "point" or "point:n".
func parse(v string) (Point, int64) {
	name, count, ok := strings.Cut(v, ":")
	n := int64(1)
	if ok {
		if c, err := strconv.ParseInt(count, 10, 64); err == nil && c > 0 {
			n = c
		}
	}
	return Point(name), n
}

// Hit kills the process with SIGKILL when p is the armed point and this is
// its nth hit. Nothing is flushed or closed: it is a crash.
func Hit(p Point) {
	if armed == "" || p != armed || hits.Add(1) != nth {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: killing the backend\n", p)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered asynchronously: never go on
}
