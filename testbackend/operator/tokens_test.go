package operator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
)

// The files an operator hands the backend are checked before they are
// trusted: the tokens file (here) and the data directory (datadir_test.go).

// wantRefused asserts err is a refusal whose message has every one of want.
func wantRefused(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted", what)
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

// token and account stand in for the backend's Config entry types.
type token struct {
	Token   string   `json:"token"`
	Account string   `json:"account"`
	Scopes  []string `json:"scopes"`
}

type account struct {
	Account   string  `json:"account"`
	VCPULimit float64 `json:"vcpuLimit"`
}

// readTokens reads a tokens file into the stand-in types and checks its
// tokens, as the backend does.
func readTokens(path string, shared bool) error {
	tokens, _, lines, err := ReadTokensFile[token, account](path, shared)
	if err != nil {
		return err
	}
	out := make([]api.Token, 0, len(tokens))
	for _, t := range tokens {
		out = append(out, api.Token{Token: t.Token, Account: t.Account, Scopes: t.Scopes})
	}
	return CheckTokens(out, path, lines)
}

const oneToken = `{"tokens":[{"token":"rc_pat_x","account":"acct","scopes":["services:read"]}]}`

// TestTokensFileReadableByOthersRefused: a tokens file that its group or
// anyone else may read (or write) is refused, naming the file, its mode
// and the fix, unless shared says it is meant to be; 0600 is accepted.
func TestTokensFileReadableByOthersRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		path := filepath.Join(dir, fmt.Sprintf("tokens-%04o.json", mode))
		writeTokens(t, path, oneToken, mode)
		wantRefused(t, "tokens file of mode "+mode.String(), readTokens(path, false), path, fmt.Sprintf("%04o", mode), "chmod 600", "--allow-shared-tokens-file")
	}

	shared := filepath.Join(dir, "shared.json")
	writeTokens(t, shared, oneToken, 0o644)
	if err := readTokens(shared, true); err != nil {
		t.Fatalf("a shared tokens file, shared: %v", err)
	}
	private := filepath.Join(dir, "private.json")
	writeTokens(t, private, oneToken, 0o600)
	if err := readTokens(private, false); err != nil {
		t.Fatalf("a tokens file of mode 0600: %v", err)
	}
}

// TestTokensFileLayout: a tokens file with a field its entries do not
// have, or one that lists no tokens, is refused naming the file; its
// accounts are read.
func TestTokensFileLayout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"an unknown field":        `{"tokens":[{"token":"rc_pat_x","account":"acct","scope":["services:read"]}]}`,
		"no tokens":               `{"tokens":[]}`,
		"no tokens, only account": `{"accounts":[{"account":"acct","vcpuLimit":1}]}`,
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		writeTokens(t, path, body, 0o600)
		wantRefused(t, "a tokens file with "+name, readTokens(path, false), path)
	}

	path := filepath.Join(dir, "accounts.json")
	writeTokens(t, path, `{"tokens":[{"token":"rc_pat_x","account":"acct"}],"accounts":[{"account":"acct","vcpuLimit":1.5}]}`, 0o600)
	tokens, accounts, lines, err := ReadTokensFile[token, account](path, false)
	if err != nil || len(tokens) != 1 || len(accounts) != 1 || accounts[0] != (account{"acct", 1.5}) || len(lines) != 1 || lines[0] != 1 {
		t.Fatalf("a tokens file with accounts: %v %v %v %v", tokens, accounts, lines, err)
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
	wantRefused(t, "a token listed twice", readTokens(path, false), path, "tokens[2]", "line 4", "tokens[0]", "line 2")

	err := CheckTokens([]api.Token{
		{Token: "t", Account: "a", Scopes: []string{api.ScopeRead}},
		{Token: "t", Account: "b", Scopes: []string{api.ScopeRead}},
	}, "", nil)
	wantRefused(t, "a token given twice in process", err, "token 1", "token 0")
}

// TestTokensNeedTokenAccountAndKnownScopes: a token without its token or
// account, or with a scope the API does not know, is refused naming it.
func TestTokensNeedTokenAccountAndKnownScopes(t *testing.T) {
	t.Parallel()
	for what, tok := range map[string]api.Token{
		"a token without its token":   {Account: "a"},
		"a token without its account": {Token: "t2"},
		"a token of an unknown scope": {Token: "t2", Account: "a", Scopes: []string{"services:admin"}},
	} {
		err := CheckTokens([]api.Token{{Token: "t1", Account: "a"}, tok}, "", nil)
		wantRefused(t, what, err, "token 1")
	}
	if err := CheckTokens([]api.Token{{Token: "t1", Account: "a", Scopes: []string{api.ScopeRead, api.ScopeWrite}}}, "", nil); err != nil {
		t.Fatalf("a token of both scopes: %v", err)
	}
}
