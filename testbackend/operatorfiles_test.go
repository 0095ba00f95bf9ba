package testbackend

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// The files an operator hands the backend are checked before they are
// trusted: the tokens file, the data directory and what is in it.

// startWith starts a test-mode backend on dataDir with cfg; a start that
// works is closed at the test's end.
func startWith(t *testing.T, dataDir string, cfg Config) (*Backend, error) {
	t.Helper()
	cfg.Listen, cfg.DataDir, cfg.Mode = "127.0.0.1:0", dataDir, sandbox.ModeTest
	b, err := New(context.Background(), cfg)
	if err == nil {
		t.Cleanup(func() { b.Close() })
	}
	return b, err
}

// wantRefused asserts err is a refusal whose message has every one of want.
func wantRefused(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: the backend started", what)
	}
	t.Logf("%s: %v", what, err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: want %q in the error, got: %v", what, w, err)
		}
	}
}

func writeTokens(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile's mode is under the umask
		t.Fatal(err)
	}
}

const oneToken = `{"tokens":[{"token":"rc_pat_x","account":"acct","scopes":["services:read"]}]}`

// TestTokensFileReadableByOthersRefused: a tokens file that its group or
// anyone else may read (or write) is refused, naming the file, its mode
// and the fix, unless AllowSharedTokensFile says it is meant to be; 0600
// is accepted.
func TestTokensFileReadableByOthersRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		path := filepath.Join(dir, fmt.Sprintf("tokens-%04o.json", mode))
		writeTokens(t, path, oneToken, mode)
		_, err := startWith(t, filepath.Join(dir, fmt.Sprintf("data-%04o", mode)), Config{TokensFile: path})
		wantRefused(t, "tokens file of mode "+mode.String(), err, path, fmt.Sprintf("%04o", mode), "chmod 600", "--allow-shared-tokens-file")
	}

	shared := filepath.Join(dir, "shared.json")
	writeTokens(t, shared, oneToken, 0o644)
	if _, err := startWith(t, filepath.Join(dir, "data-shared"), Config{TokensFile: shared, AllowSharedTokensFile: true}); err != nil {
		t.Fatalf("a shared tokens file with AllowSharedTokensFile: %v", err)
	}
	private := filepath.Join(dir, "private.json")
	writeTokens(t, private, oneToken, 0o600)
	if _, err := startWith(t, filepath.Join(dir, "data-private"), Config{TokensFile: private}); err != nil {
		t.Fatalf("a tokens file of mode 0600: %v", err)
	}
}

// TestDuplicateTokensRefused: a token listed twice is refused, naming the
// entry that repeats it, its line and the one it repeats; tokens given in
// process are held to the same.
func TestDuplicateTokensRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.json")
	writeTokens(t, path, `{"tokens": [
  {"token": "rc_pat_a", "account": "acct-a", "scopes": ["services:read"]},
  {"token": "rc_pat_b", "account": "acct-b", "scopes": ["services:read"]},
  {"token": "rc_pat_a", "account": "acct-c", "scopes": ["services:read", "services:write"]}
]}`, 0o600)
	_, err := startWith(t, filepath.Join(dir, "data"), Config{TokensFile: path})
	wantRefused(t, "a token listed twice", err, path, "tokens[2]", "line 4", "tokens[0]", "line 2")

	_, err = startWith(t, filepath.Join(dir, "data2"), Config{Tokens: []Token{
		{Token: "t", Account: "a", Scopes: []string{api.ScopeRead}},
		{Token: "t", Account: "b", Scopes: []string{api.ScopeRead}},
	}})
	wantRefused(t, "a token given twice in process", err, "token 1", "token 0")
}

// TestDataDirChecked: a data directory that is missing is created 0700; one
// that others may write, that another user owns or that is a symbolic link
// is refused, naming it and the fix.
func TestDataDirChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh")
	if _, err := startWith(t, fresh, Config{}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("a new data directory: %v, %v; want mode 0700", fi.Mode(), err)
	}

	for _, mode := range []os.FileMode{0o777, 0o770, 0o702} {
		d := filepath.Join(dir, fmt.Sprintf("writable-%04o", mode))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		_, err := startWith(t, d, Config{})
		wantRefused(t, "a data directory of mode "+mode.String(), err, d, fmt.Sprintf("%04o", mode), "chmod 700")
	}

	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, err := startWith(t, link, Config{})
	wantRefused(t, "a data directory that is a symbolic link", err, link, "symbolic link")

	if os.Geteuid() != 0 {
		t.Log("not root: the other owner's case needs chown; skipped")
		return
	}
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err = startWith(t, other, Config{})
	wantRefused(t, "a data directory another user owns", err, other, "uid 65534")
}

// TestDataDirSymlinksNotFollowed: a symbolic link planted inside the data
// directory, as a record, the dev token, a directory of records or a test
// container, is refused by name instead of read through.
func TestDataDirSymlinksNotFollowed(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	record := filepath.Join(outside, "record.json")
	if err := os.WriteFile(record, []byte(`{"id":"sbx-planted","account":"acct","status":"exited","template":"base","image":"rarecloud/base:1","createdAt":"2026-01-01T00:00:00Z","timeoutMs":300000,"expiresAt":"2026-01-01T00:05:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(outside, "token")
	if err := os.WriteFile(token, []byte("rc_pat_planted\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, link, target string
	}{
		{"a record", "records/sandboxes/sbx-planted.json", record},
		{"an idempotency record", "records/idempotency/" + strings.Repeat("a", 64) + ".json", record},
		{"the dev token", DevTokenFile, token},
		{"the records directory", "records", outside},
		{"a test-mode container", TestModeDir + "/ctr-planted.json", record},
	}
	for _, tc := range cases {
		data := filepath.Join(t.TempDir(), "data")
		path := filepath.Join(data, tc.link)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(tc.target, path); err != nil {
			t.Fatal(err)
		}
		b, err := startWith(t, data, Config{})
		if err == nil && b.DevToken() == "rc_pat_planted" {
			t.Errorf("%s: the planted token was used", tc.name)
			continue
		}
		wantRefused(t, tc.name+" that is a symbolic link", err, path, "symbolic link")
	}
}

// TestDefaultDataDirWithoutHome: with neither HOME nor XDG_CACHE_HOME the
// default is never a fixed path under /tmp: root's is under /var/lib,
// anyone else's start fails asking for --data.
func TestDefaultDataDirWithoutHome(t *testing.T) {
	t.Setenv("HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")
	defer func(f func() int) { geteuid = f }(geteuid)

	geteuid = func() int { return 0 }
	if got := DefaultDataDir(); got != "/var/lib/rarecloud/testbackend" {
		t.Errorf("root without HOME: default data directory %q, want /var/lib/rarecloud/testbackend", got)
	}
	geteuid = func() int { return 1000 }
	if got := DefaultDataDir(); got != "" {
		t.Errorf("a user without HOME: default data directory %q, want none", got)
	}
	_, err := New(context.Background(), Config{Listen: "127.0.0.1:0", Mode: sandbox.ModeTest})
	wantRefused(t, "a user without HOME nor --data", err, "--data", "HOME")
	if err != nil && strings.Contains(err.Error(), os.TempDir()) {
		t.Errorf("the error names a path under %s: %v", os.TempDir(), err)
	}
}

// TestNoFixedPathUnderTmp: no script and no non-test Go file of the
// backend names a fixed path under /tmp (a PID is no secret either):
// another local user can create it first, as a link to a file of root's
// that the script then writes through. Temporary files come from mktemp
// (scripts) or os.MkdirTemp / t.TempDir (Go), under $TMPDIR.
func TestNoFixedPathUnderTmp(t *testing.T) {
	var files []string
	for _, pattern := range []string{"../scripts/*.sh", "../GNUmakefile", "images/*.sh", "*/*.go", "*/*/*.go", "*.go"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 20 {
		t.Fatalf("found only %d files to check: %v", len(files), files)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "/tmp/") && !strings.Contains(line, "mktemp") && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d names a fixed path under /tmp: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
