package testbackend

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// What New refuses to start on. The checks of the operator's files are
// package operator's, and tested there; these test that New makes them,
// and that nothing the backend reads from its data directory follows a
// link.

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

// TestStartChecksOperatorFiles: New refuses a tokens file others may
// read (unless AllowSharedTokensFile), a token listed twice in the file
// (naming its lines) or given twice in process, and a data directory
// others may write or that is a symbolic link; a tokens file of mode
// 0600 on a fresh data directory starts, the directory made 0700.
func TestStartChecksOperatorFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile := func(name, body string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // WriteFile's mode is under the umask
			t.Fatal(err)
		}
		return path
	}
	const oneToken = `{"tokens":[{"token":"rc_pat_x","account":"acct","scopes":["services:read"]}]}`

	shared := writeFile("shared.json", oneToken, 0o644)
	_, err := startWith(t, filepath.Join(dir, "data-shared"), Config{TokensFile: shared})
	wantRefused(t, "a tokens file of mode 0644", err, shared, "0644", "chmod 600", "--allow-shared-tokens-file")
	if _, err := startWith(t, filepath.Join(dir, "data-shared-allowed"), Config{TokensFile: shared, AllowSharedTokensFile: true}); err != nil {
		t.Fatalf("a shared tokens file with AllowSharedTokensFile: %v", err)
	}

	twice := writeFile("twice.json", `{"tokens": [
  {"token": "rc_pat_a", "account": "acct-a", "scopes": ["services:read"]},
  {"token": "rc_pat_a", "account": "acct-b", "scopes": ["services:read"]}
]}`, 0o600)
	_, err = startWith(t, filepath.Join(dir, "data-twice"), Config{TokensFile: twice})
	wantRefused(t, "a token listed twice", err, twice, "tokens[1]", "line 3", "tokens[0]", "line 2")
	_, err = startWith(t, filepath.Join(dir, "data-twice-in-process"), Config{Tokens: []Token{
		{Token: "t", Account: "a", Scopes: []string{api.ScopeRead}},
		{Token: "t", Account: "b", Scopes: []string{api.ScopeRead}},
	}})
	wantRefused(t, "a token given twice in process", err, "token 1", "token 0")

	writable := filepath.Join(dir, "writable")
	if err := os.Mkdir(writable, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(writable, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err = startWith(t, writable, Config{})
	wantRefused(t, "a data directory of mode 0777", err, writable, "0777", "chmod 700")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(writable, link); err != nil {
		t.Fatal(err)
	}
	_, err = startWith(t, link, Config{})
	wantRefused(t, "a data directory that is a symbolic link", err, link, "symbolic link")

	private := writeFile("private.json", oneToken, 0o600)
	fresh := filepath.Join(dir, "fresh")
	if _, err := startWith(t, fresh, Config{TokensFile: private}); err != nil {
		t.Fatalf("a tokens file of mode 0600: %v", err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("a new data directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
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
