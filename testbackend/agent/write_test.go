package agent

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestWriteAnsweredInProcess: a request for the agent's own write is
// answered by the agent itself with the write script's exit codes and
// words (what the backend reads), without starting a process: the agent
// here names itself by a path where no program is, so an answer that
// started a process fails (red when writeInProcess is not wired into
// Serve). Every case leaves no temporary file behind.
func TestWriteAnsweredInProcess(t *testing.T) {
	old := self
	self = "/nonexistent/rarecloud-agent-under-test"
	t.Cleanup(func() { self = old })
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "old"), []byte("old content"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "target"), []byte("kept"), 0o644))
	must(os.Symlink(filepath.Join(dir, "target"), filepath.Join(dir, "link")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	must(os.Symlink(filepath.Join(dir, "fifo"), filepath.Join(dir, "link-to-fifo")))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(os.Symlink(filepath.Join(dir, "sub"), filepath.Join(dir, "link-to-dir")))
	must(os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	// A socket of the test's own: never a device of the host's, which a
	// broken Write run as root would replace.
	ln, err := net.Listen("unix", filepath.Join(dir, "socket"))
	must(err)
	t.Cleanup(func() { ln.Close() })
	call := session(t)
	long := strings.Repeat("n", 300)
	for _, c := range []struct {
		name, path string
		code       int
		stderr     string // what the backend reads in it
		written    bool   // the content is at the path afterwards
	}{
		{"new file", filepath.Join(dir, "new"), 0, "", true},
		{"new parents", filepath.Join(dir, "a", "b", "c"), 0, "", true},
		{"over a file", filepath.Join(dir, "old"), 0, "", true},
		{"a link is replaced, not followed", filepath.Join(dir, "link"), 0, "", true},
		{"a link to a FIFO is replaced", filepath.Join(dir, "link-to-fifo"), 0, "", true},
		{"directory", filepath.Join(dir, "sub"), CatDirectory, "", false},
		{"a link to a directory", filepath.Join(dir, "link-to-dir"), CatDirectory, "", false},
		{"FIFO", filepath.Join(dir, "fifo"), CatNotRegular, "", false},
		{"socket", filepath.Join(dir, "socket"), CatNotRegular, "", false},
		{"a parent is a file", filepath.Join(dir, "file", "x"), WriteNoParent, "Not a directory", false},
		{"name too long", filepath.Join(dir, long), WriteFailed, "File name too long", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			content := []byte("content of " + c.name)
			res := call(Request{ID: 8, Argv: WriteCommand(self, c.path), Stdin: content, MaxOutput: 64 << 10})
			if res.Error != "" || res.ExitCode == nil {
				t.Fatalf("not answered in process: %+v", res)
			}
			if *res.ExitCode != c.code || !strings.Contains(string(res.Stderr), c.stderr) || (c.stderr == "") != (len(res.Stderr) == 0) {
				t.Fatalf("exit %d, stderr %q; want exit %d, stderr with %q", *res.ExitCode, res.Stderr, c.code, c.stderr)
			}
			// The mark comes before the rename: a name too long fails there.
			wantMark := c.code == 0 || c.name == "name too long"
			if marked := bytes.Contains(res.Stdout, []byte(RenameMark+"\n")); marked != wantMark {
				t.Errorf("stdout %q: the rename mark printed %v, want %v", res.Stdout, marked, wantMark)
			}
			var got []byte
			st, err := os.Lstat(c.path)
			if err == nil && st.Mode().IsRegular() { // reading a FIFO would wait
				got, err = os.ReadFile(c.path)
			}
			if c.written && (err != nil || !bytes.Equal(got, content)) {
				t.Errorf("read back %q, %v; want %q", got, err, content)
			}
			if !c.written && bytes.Equal(got, content) {
				t.Errorf("written although refused")
			}
		})
	}
	if got, err := os.ReadFile(filepath.Join(dir, "target")); err != nil || string(got) != "kept" {
		t.Errorf("the link's target was written through: %q, %v", got, err)
	}
	for name, mode := range map[string]os.FileMode{"fifo": os.ModeNamedPipe, "socket": os.ModeSocket} {
		if st, err := os.Lstat(filepath.Join(dir, name)); err != nil || st.Mode()&mode == 0 {
			t.Errorf("the %s is gone or changed: %v, %v", name, st, err)
		}
	}
	err = filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if strings.HasPrefix(filepath.Base(p), ".rarecloud-write.") {
			t.Errorf("a temporary file was left: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWriteNeverReachesProcfs: in process, /proc/self is the agent, so a
// write there must not land: Write only creates a file and renames it,
// which procfs refuses. Positive control: the agent's own name is
// writable in place, which is what a write that opened the path would do.
func TestWriteNeverReachesProcfs(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	comm := "/proc/self/task/" + strconv.Itoa(syscall.Gettid()) + "/comm"
	before, err := os.ReadFile(comm)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(comm, []byte("renamed"), 0); err != nil {
		t.Fatalf("positive control: the thread's name cannot be written in place: %v", err)
	}
	_ = os.WriteFile(comm, before, 0)
	res, ok := writeInProcess(Request{Argv: WriteCommand(self, "/proc/self/comm"), Stdin: []byte("pwned"), MaxOutput: 1 << 10})
	if !ok || res.ExitCode == nil || *res.ExitCode == 0 {
		t.Fatalf("a write to /proc/self/comm answered %+v (taken %v)", res, ok)
	}
	for _, f := range []string{"/proc/self/comm", comm} {
		if got, _ := os.ReadFile(f); strings.Contains(string(got), "pwned") {
			t.Fatalf("%s was written: %q", f, got)
		}
	}
}

// TestWriteInProcessOnlyItsOwn: only the agent's own write of an absolute
// path with an output limit is taken in process; anything else runs as a
// process, as it always did.
func TestWriteInProcessOnlyItsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	for name, req := range map[string]Request{
		"its own write":   {Argv: WriteCommand(self, path), MaxOutput: 10},
		"another program": {Argv: WriteCommand("/bin/other", path), MaxOutput: 10},
		"relative path":   {Argv: WriteCommand(self, "f"), MaxOutput: 10},
		"no limit":        {Argv: WriteCommand(self, path)},
		"more arguments":  {Argv: append(WriteCommand(self, path), "x"), MaxOutput: 10},
		"its own cat":     {Argv: CatCommand(self, path, 10), MaxOutput: 10},
	} {
		if _, ok := writeInProcess(req); ok != (name == "its own write") {
			t.Errorf("%s: taken in process %v", name, ok)
		}
	}
}
