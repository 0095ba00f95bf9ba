package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSandboxRecordsRoundTrip(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	code := 3
	now := time.Now().UTC().Truncate(time.Millisecond)
	in := &Sandbox{ID: "sbx-a", Account: "acct", Status: "exited", CreatedAt: now, ExitCode: &code, EndedAt: &now, Env: map[string]string{"K": "ü"}, Labels: map[string]string{"a": "b"}, IdempotencyKey: "k"}
	if err := s.PutSandbox(in); err != nil {
		t.Fatal(err)
	}
	in.Status = "terminated" // a second write replaces the first
	if err := s.PutSandbox(in); err != nil {
		t.Fatal(err)
	}
	got, err := s.Sandboxes()
	if err != nil || len(got) != 1 {
		t.Fatalf("%d records, %v", len(got), err)
	}
	if g := got[0]; g.Status != "terminated" || *g.ExitCode != 3 || !g.CreatedAt.Equal(now) || g.Env["K"] != "ü" || g.IdempotencyKey != "k" {
		t.Fatalf("read back %+v", g)
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(filepath.Join(s.Dir(), sandboxDir))
	if len(entries) != 1 {
		t.Fatalf("files: %v", entries)
	}
	if err := s.DeleteSandbox("sbx-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox("sbx-a"); err != nil {
		t.Fatalf("deleting a missing record: %v", err)
	}
	if got, _ := s.Sandboxes(); len(got) != 0 {
		t.Fatalf("left: %+v", got)
	}
}

func TestBadIDsAreRefused(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "../escape", "a/b", ".", "..", "x\x00y", strings.Repeat("x", 200)} {
		if err := s.PutSandbox(&Sandbox{ID: id}); err == nil {
			t.Errorf("id %q accepted", id)
		}
	}
}

// A record that does not decode is an error, not a silent skip: losing a
// record would leak its container.
func TestCorruptRecordIsReported(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Dir(), sandboxDir, "sbx-bad.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Sandboxes(); err == nil || !strings.Contains(err.Error(), "sbx-bad.json") {
		t.Fatalf("corrupt record: %v", err)
	}
}

func TestIdempotencyKeysAreHashedIntoFileNames(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*Idempotency{
		{Account: "a", Key: "../../etc/passwd", RequestHash: "h1"},
		{Account: "b", Key: "../../etc/passwd", RequestHash: "h2"},
	} {
		if err := s.PutIdempotency(r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Idempotencies()
	if err != nil || len(got) != 2 {
		t.Fatalf("%d keys (per account), %v", len(got), err)
	}
	entries, _ := os.ReadDir(filepath.Join(s.Dir(), idempotencyDir))
	for _, e := range entries {
		if strings.Contains(e.Name(), "passwd") || len(e.Name()) != 64+len(".json") {
			t.Errorf("file name %q is not a hash", e.Name())
		}
	}
	if err := s.DeleteIdempotency("a", "../../etc/passwd"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Idempotencies(); len(got) != 1 || got[0].Account != "b" {
		t.Fatalf("after delete: %+v", got)
	}
}

// TestOpenRemovesLeftoverTemporaryFiles: a write cut short by a crash
// leaves a .tmp- file that may hold env values; the next Open removes it
// and keeps every record.
func TestOpenRemovesLeftoverTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutSandbox(&Sandbox{ID: "sbx-kept", Status: "running"}); err != nil {
		t.Fatal(err)
	}
	var leftovers []string
	for _, sub := range []string{sandboxDir, idempotencyDir} {
		p := filepath.Join(dir, sub, tmpPrefix+"123456")
		if err := os.WriteFile(p, []byte(`{"env":{"K":"secret-value"}}`), 0o600); err != nil {
			t.Fatal(err)
		}
		leftovers = append(leftovers, p)
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	for _, p := range leftovers {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived Open (%v)", p, err)
		}
	}
	if got, err := s.Sandboxes(); err != nil || len(got) != 1 || got[0].ID != "sbx-kept" {
		t.Fatalf("records after Open: %v %v", got, err)
	}
}

// TestRenamesAndUnlinksAreSynced: every write and every delete syncs the
// record's directory after its rename or unlink (a crash may undo either
// until then); a delete of a missing record syncs nothing.
func TestRenamesAndUnlinksAreSynced(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var synced []string
	orig := syncDir
	t.Cleanup(func() { syncDir = orig })
	syncDir = func(dir string) error {
		synced = append(synced, filepath.Base(dir))
		return orig(dir)
	}
	if err := s.PutSandbox(&Sandbox{ID: "sbx-a"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIdempotency(&Idempotency{Account: "acct", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox("sbx-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox("sbx-missing"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteIdempotency("acct", "k"); err != nil {
		t.Fatal(err)
	}
	// A record with a log file: both go, each directory synced.
	if err := s.PutSandbox(&Sandbox{ID: "sbx-b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLogs("sbx-b", []byte("out")); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSandbox("sbx-b"); err != nil {
		t.Fatal(err)
	}
	want := []string{sandboxDir, idempotencyDir, sandboxDir, idempotencyDir, sandboxDir, logsDir, sandboxDir, logsDir}
	if strings.Join(synced, " ") != strings.Join(want, " ") {
		t.Fatalf("directories synced: %v, want %v", synced, want)
	}
}

// TestLogsLiveBesideTheirRecord: a sandbox's log file is written and read
// apart from its record (which never holds it), listed, and removed with
// the record.
func TestLogsLiveBesideTheirRecord(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	logs := []byte(strings.Repeat("x", 1<<20))
	if err := s.PutSandbox(&Sandbox{ID: "sbx-a", LogBytes: int64(len(logs))}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutLogs("sbx-a", logs); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Logs("sbx-a"); err != nil || string(got) != string(logs) {
		t.Fatalf("logs read back: %d bytes, %v", len(got), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, sandboxDir, "sbx-a.json")); err != nil || fi.Size() > 4096 {
		t.Fatalf("the record holds more than a marker: %v %v", fi, err)
	}
	if ids, err := s.LogIDs(); err != nil || len(ids) != 1 || ids[0] != "sbx-a" {
		t.Fatalf("log ids: %v %v", ids, err)
	}
	if _, err := s.Logs("sbx-none"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("logs of a sandbox without any: %v, want not exist", err)
	}
	if err := s.DeleteSandbox("sbx-a"); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.LogIDs(); err != nil || len(ids) != 0 {
		t.Fatalf("log files left after the delete: %v %v", ids, err)
	}
}

// TestRecordsAreReadWithoutFollowing: a record that is a symbolic link or
// a FIFO is reported by name, not read through (a FIFO would hang the
// start), and a write replaces a link instead of writing through it.
func TestRecordsAreReadWithoutFollowing(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside.json")
	if err := os.WriteFile(outside, []byte(`{"id":"sbx-out","account":"acct","status":"exited"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"a symbolic link", func(path string) error { return os.Symlink(outside, path) }, "symbolic link"},
		{"a FIFO", func(path string) error { return syscall.Mkfifo(path, 0o600) }, "not a regular file"},
	} {
		dir := t.TempDir()
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, sandboxDir, "sbx-out.json")
		if err := tc.make(path); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := s.Sandboxes(); done <- err }()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s as a record: reading the records hangs", tc.name)
		}
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s as a record: want an error naming %s (%s), got %v", tc.name, path, tc.want, err)
		}
	}

	// A write over a planted link replaces the link; the file it named is untouched.
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, sandboxDir, "sbx-out.json")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSandbox(&Sandbox{ID: "sbx-out", Account: "mine"}); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(outside); err != nil || strings.Contains(string(data), "mine") {
		t.Fatalf("the write went through the link: %s, %v", data, err)
	}
}
