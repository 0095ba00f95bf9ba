package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestCatAnsweredInProcess: a request for the agent's own cat is answered
// by the agent itself, with Cat's exit codes, and an output over the
// limit is cut and said to be. The agent here names itself by a path
// where no program is, so an answer that started a process fails (red
// when catInProcess is not wired into Serve).
func TestCatAnsweredInProcess(t *testing.T) {
	old := self
	self = "/nonexistent/rarecloud-agent-under-test"
	t.Cleanup(func() { self = old })
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	content := bytes.Repeat([]byte("<"), 100)
	if err := os.WriteFile(file, content, 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	call := session(t)
	for _, c := range []struct {
		name      string
		path      string
		max       int
		code      int
		stdout    []byte
		truncated bool
	}{
		{"regular file", file, 1 << 20, 0, content, false},
		{"at the limit", file, 100, 0, content, false},
		{"over the limit", file, 10, 0, content[:10], true},
		{"missing", filepath.Join(dir, "none"), 1 << 20, CatMissing, nil, false},
		{"directory", dir, 1 << 20, CatDirectory, nil, false},
		{"FIFO without a writer", fifo, 1 << 20, CatNotRegular, nil, false},
		{"device", "/dev/zero", 1 << 20, CatNotRegular, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := call(Request{ID: 7, Argv: CatCommand(self, c.path, c.max), MaxOutput: c.max})
			if res.Error != "" || res.ExitCode == nil {
				t.Fatalf("not answered in process: %+v", res)
			}
			if *res.ExitCode != c.code || !bytes.Equal(res.Stdout, c.stdout) || res.StdoutTruncated != c.truncated || len(res.Stderr) != 0 {
				t.Fatalf("exit %d, %d bytes, truncated %v, stderr %q; want exit %d, %d bytes, truncated %v", *res.ExitCode, len(res.Stdout), res.StdoutTruncated, res.Stderr, c.code, len(c.stdout), c.truncated)
			}
		})
	}
}

// TestCatInProcessOnlyItsOwn: only the agent's own cat of an absolute
// path with an output limit, not on procfs (where /proc/self would be the
// agent), is taken in process; anything else runs as a process, as it
// always did. Red without the procfs check: the agent's own status is
// read.
func TestCatInProcessOnlyItsOwn(t *testing.T) {
	for name, req := range map[string]Request{
		"its own cat":          {Argv: CatCommand(self, "/etc/hostname", 10), MaxOutput: 10},
		"another program":      {Argv: CatCommand("/bin/other", "/etc/hostname", 10), MaxOutput: 10},
		"relative path":        {Argv: CatCommand(self, "hostname", 10), MaxOutput: 10},
		"no limit":             {Argv: CatCommand(self, "/etc/hostname", 10)},
		"more arguments":       {Argv: append(CatCommand(self, "/etc/hostname", 10), "x"), MaxOutput: 10},
		"a limit not a number": {Argv: []string{self, CatArg, "/etc/hostname", "ten"}, MaxOutput: 10},
		"a file of procfs":     {Argv: CatCommand(self, "/proc/self/status", 1<<20), MaxOutput: 1 << 20},
	} {
		if _, ok := catInProcess(req); ok != (name == "its own cat") {
			t.Errorf("%s: taken in process %v", name, ok)
		}
	}
}
