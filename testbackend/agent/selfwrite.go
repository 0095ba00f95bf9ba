package agent

import (
	"bytes"
	"path/filepath"
	"time"
)

// WriteArg is the agent binary's argument that makes it Write its stdin
// to the path after it instead of serving (cmd/rarecloud-agent).
const WriteArg = "write"

// WriteCommand is the argv that runs the agent's own Write of its stdin to
// path in a sandbox whose agent binary is at agentPath: what the
// backend's file writes send. The agent that is asked for it answers it
// without a process (writeInProcess); an agent that runs it as one
// answers the same.
func WriteCommand(agentPath, path string) []string {
	return []string{agentPath, WriteArg, path}
}

// writeInProcess answers a request for the agent's own Write to an
// absolute path without starting a process, as catInProcess does for
// reads. The agent runs as the sandbox user, as the process would. Where
// /proc/self would name the agent rather than the process, nothing can be
// written anyway: Write only creates a new file and renames it, which no
// procfs directory allows.
func writeInProcess(req Request) (Response, bool) {
	if len(req.Argv) != 3 || req.Argv[0] != self || req.Argv[1] != WriteArg || !filepath.IsAbs(req.Argv[2]) || req.MaxOutput <= 0 {
		return Response{}, false
	}
	start := time.Now()
	stdout := &capped{max: req.MaxOutput}
	stderr := &capped{max: req.MaxOutput}
	code := Write(req.Argv[2], bytes.NewReader(req.Stdin), stdout, stderr)
	return ownAnswer(req, start, code, stdout, stderr), true
}
