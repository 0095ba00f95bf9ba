package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// CatArg is the agent binary's argument that makes it Cat the path and
// up to the limit after it instead of serving (cmd/rarecloud-agent, the
// backend's readScript).
const CatArg = "cat"

// CatCommand is the argv that runs the agent's own cat on path, of at most
// limit bytes, in a sandbox whose agent binary is at agentPath: what the
// backend's file reads send. The agent that is asked for it answers it
// without a process (catInProcess); an agent that runs it as one answers
// the same.
func CatCommand(agentPath, path string, limit int) []string {
	return []string{agentPath, CatArg, path, strconv.Itoa(limit)}
}

// CatLimit reads the limit of a CatCommand, false when it is not one.
func CatLimit(arg string) (int64, bool) {
	n, err := strconv.ParseInt(arg, 10, 64)
	return n, err == nil && n >= 0 && n < 1<<40
}

// self is the path the agent was started as, what CatCommand names it;
// a variable so that tests can give it another.
var self = os.Args[0]

// errEnough ends a copy whose reader has all it keeps.
var errEnough = errors.New("output limit reached")

// catInProcess answers a request for the agent's own cat of an absolute
// path, with an output limit, without starting a process. The agent runs
// as the sandbox user, the user the process would run as, so Cat opens
// the file with the same permissions and answers the same; under gVisor
// a process start is most of a small read's time. It stops reading once
// the limit is passed (the answer says truncated), where a process would
// read the file to its end. A file on procfs is left to a process (false),
// as is any other request: there /proc/self is the reader, and the agent
// is not dumpable so that sandbox code cannot look into it.
func catInProcess(req Request) (Response, bool) {
	if len(req.Argv) != 4 || req.Argv[0] != self || req.Argv[1] != CatArg || !filepath.IsAbs(req.Argv[2]) || req.MaxOutput <= 0 {
		return Response{}, false
	}
	limit, ok := CatLimit(req.Argv[3])
	if !ok {
		return Response{}, false
	}
	start := time.Now()
	stdout := &capped{max: req.MaxOutput}
	stderr := &capped{max: req.MaxOutput}
	code := cat(req.Argv[2], limit, enough{stdout}, stderr, onProcfs)
	if code == catDeclined {
		return Response{}, false
	}
	return ownAnswer(req, start, code, stdout, stderr), true
}

// enough is a capped writer that ends the copy (errEnough) once it has
// dropped a byte, instead of taking the rest.
type enough struct{ c *capped }

func (e enough) Write(p []byte) (int, error) {
	n, _ := e.c.Write(p)
	if e.c.dropped {
		return n, errEnough
	}
	return n, nil
}

// onProcfs says whether fd is a file of procfs (or cannot tell).
func onProcfs(fd int) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(fd, &st) != nil || st.Type == unix.PROC_SUPER_MAGIC
}
