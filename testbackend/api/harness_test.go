package api_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/registrytest"
)

// Tokens of the shared backend.
const (
	tokA      = "rc_pat_test_a_rw"
	tokARead  = "rc_pat_test_a_read"
	tokAWrite = "rc_pat_test_a_write"
	tokB      = "rc_pat_test_b_rw"
)

func testTokens() []testbackend.Token {
	rw := []string{api.ScopeRead, api.ScopeWrite}
	return []testbackend.Token{
		{Token: tokA, Account: "acct-a", Scopes: rw},
		{Token: tokARead, Account: "acct-a", Scopes: []string{api.ScopeRead}},
		{Token: tokAWrite, Account: "acct-a", Scopes: []string{api.ScopeWrite}},
		{Token: tokB, Account: "acct-b", Scopes: rw},
	}
}

var (
	sharedOnce sync.Once
	shared     *testbackend.Backend
	sharedErr  error
	sharedDir  string // the shared backend's data, removed in TestMain
)

// realBackend is one backend on the real engine shared by the package's
// tests; tests that restart a backend start their own.
func realBackend(t testing.TB) *client {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rarecloud-api-test-") //nolint:usetesting // shared by every test, removed in TestMain
		if err != nil {
			sharedErr = err
			return
		}
		sharedDir = dir
		shared, sharedErr = startBackend(dir, testbackend.Config{Ephemeral: true})
	})
	if sharedErr != nil {
		t.Fatalf("start backend: %v", sharedErr)
	}
	return newClient(t, shared.URL())
}

// startBackend starts a backend with the package's tokens unless cfg has
// its own; the engine must answer unless cfg is the mock mode or names
// another engine.
func startBackend(dir string, cfg testbackend.Config) (*testbackend.Backend, error) {
	if cfg.Tokens == nil {
		cfg.Tokens = testTokens()
	}
	return apitest.StartBackend(dir, cfg, cfg.Mode != "test" && cfg.DockerHost == "")
}

func TestMain(m *testing.M) {
	code := m.Run()
	registrytest.Cleanup()
	for _, b := range []*binary{plainBinary, failpointsBuild} {
		if b.path != "" {
			os.RemoveAll(filepath.Dir(b.path))
		}
	}
	if shared != nil {
		apitest.DeleteAll(shared.URL(), 0, tokA, tokB)
		if n := apitest.RawMismatches.Load(); n > 0 && code == 0 {
			fmt.Fprintf(os.Stderr, "%d cleanup answers did not match openapi.yaml\n", n)
			code = 1
		}
		shared.Close()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	os.Exit(code)
}

// client is the shared client; every request fails the test at once when
// it goes wrong.
type client struct{ *apitest.Client }

func newClient(t testing.TB, base string) *client {
	return &client{apitest.NewClient(t, base)}
}

// command runs cmd in one of account a's sandboxes, with the backend's
// default timeout.
func (c *client) command(id, cmd string) apitest.ExecResult {
	c.T.Helper()
	return c.Command(tokA, id, cmd, 0)
}

func exitCode(t *testing.T, r apitest.ExecResult) int {
	t.Helper()
	if r.ExitCode == nil {
		t.Fatalf("exit code is null: %+v", r)
	}
	return *r.ExitCode
}

func contains(t *testing.T, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Fatalf("want %q in %q", want, got)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
