// Package hostcpu reads how long the host's CPUs have been busy, for the
// bench's rows and for tests that compare a cgroup's accounting with the
// host's.
package hostcpu

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// Busy is the CPU time all of the host's CPUs have been busy (user, nice,
// system, irq, softirq, steal) since boot, from /proc/stat, or 0 when
// unknown. Its resolution is a clock tick (10 ms) per CPU.
func Busy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(data), "\n", 2)[0])
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system [idle iowait] irq softirq steal
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
