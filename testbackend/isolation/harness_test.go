package isolation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// Every run has its own tokens and canary, so a search for them inside a
// sandbox can only find what this run put there.
var (
	tokA = "rc_pat_iso_a_" + randomHex(12)
	tokB = "rc_pat_iso_b_" + randomHex(12)
	// The CPU share test's two accounts, used by no other test.
	tokHeavy = "rc_pat_iso_heavy_" + randomHex(12)
	tokLight = "rc_pat_iso_light_" + randomHex(12)
	// The CPU cap test's two accounts and the CPU limit test's, used by
	// no other test.
	tokCapped    = "rc_pat_iso_capped_" + randomHex(12)
	tokNeighbour = "rc_pat_iso_neighbour_" + randomHex(12)
	tokLimit     = "rc_pat_iso_limit_" + randomHex(12)
	// The transfer pace test's two accounts, used by no other test.
	tokReader     = "rc_pat_iso_reader_" + randomHex(12)
	tokReaderPeer = "rc_pat_iso_reader_peer_" + randomHex(12)
	canary        = "rc-iso-canary-" + randomHex(12)
)

// canaryEnv is set in the test process (and so in the backend running in
// it): it must never show up inside a sandbox.
const canaryEnv = "RARECLOUD_ISOLATION_CANARY"

// The writable areas of the shared backend's sandboxes are small, so that
// filling them is quick.
const smallDisk = 8 << 20

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func testTokens() []testbackend.Token {
	rw := []string{api.ScopeRead, api.ScopeWrite}
	return []testbackend.Token{
		{Token: tokA, Account: "acct-a", Scopes: rw},
		{Token: tokB, Account: "acct-b", Scopes: rw},
		{Token: tokHeavy, Account: "acct-cpu-heavy", Scopes: rw},
		{Token: tokLight, Account: "acct-cpu-light", Scopes: rw},
		{Token: tokCapped, Account: "acct-cpu-capped", Scopes: rw},
		{Token: tokNeighbour, Account: "acct-cpu-neighbour", Scopes: rw},
		{Token: tokLimit, Account: "acct-cpu-limit", Scopes: rw},
		{Token: tokReader, Account: "acct-transfer-reader", Scopes: rw},
		{Token: tokReaderPeer, Account: "acct-transfer-peer", Scopes: rw},
	}
}

var (
	sharedOnce sync.Once
	shared     *testbackend.Backend
	sharedDir  string
	sharedLog  *os.File
	sharedErr  error
)

func TestMain(m *testing.M) {
	if err := os.Setenv(canaryEnv, canary); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	if shared != nil {
		apitest.DeleteAll(shared.URL(), time.Minute, tokA, tokB)
		if n := apitest.RawMismatches.Load(); n > 0 && code == 0 {
			fmt.Fprintf(os.Stderr, "%d cleanup answers did not match openapi.yaml\n", n)
			code = 1
		}
		_ = shared.Close()
	}
	if sharedLog != nil {
		_ = sharedLog.Close()
	}
	if sharedDir != "" {
		if code == 0 {
			_ = os.RemoveAll(sharedDir)
		} else {
			fmt.Fprintf(os.Stderr, "the shared backend's log and records stay in %s\n", sharedDir)
		}
	}
	os.Exit(code)
}

// engineHost is the engine `make setup` starts.
func engineHost() string { return docker.DefaultHost }

// requireEngine fails (never skips) when the engine or the template images
// are missing, and says how to get them.
func requireEngine(t *testing.T) {
	t.Helper()
	host := engineHost()
	path := strings.TrimPrefix(host, "unix://")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no container engine socket at %s (%v): run `make setup` (scripts/setup.sh, as root) first", path, err)
	}
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		t.Fatalf("the container engine at %s does not answer (%v): run `make setup` (scripts/setup.sh, as root) first", host, err)
	}
	for _, img := range []string{sandbox.ImageBase, sandbox.ImagePython} {
		if _, err := cli.ImageInspect(ctx, img); err != nil {
			t.Fatalf("image %s missing on %s (%v): run `make setup`", img, host, err)
		}
	}
}

// backend is the package's shared backend on the sandbox network, with
// 8 MiB writable areas and no warm pool.
func backend(t *testing.T) *apiClient {
	t.Helper()
	requireEngine(t)
	sharedOnce.Do(func() {
		sharedDir, sharedErr = os.MkdirTemp("", "rarecloud-isolation-") //nolint:usetesting // shared by every test, removed in TestMain
		if sharedErr != nil {
			return
		}
		sharedLog, sharedErr = os.Create(filepath.Join(sharedDir, "backend.log"))
		if sharedErr != nil {
			return
		}
		logger := slog.New(slog.NewTextHandler(sharedLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
		// The agent of this tree, not whichever make setup installed last.
		var agentPath string
		if agentPath, sharedErr = buildAgent(sharedDir, agentPkg); sharedErr != nil {
			return
		}
		shared, sharedErr = startBackend(filepath.Join(sharedDir, "data"), testbackend.Config{HomeBytes: smallDisk, TmpBytes: smallDisk, Logger: logger, Agent: agentPath, Ephemeral: true})
	})
	if sharedErr != nil {
		t.Fatalf("start backend: %v", sharedErr)
	}
	return newClient(t, shared.URL())
}

// startBackend starts a backend with this run's tokens, on an engine that
// must answer.
func startBackend(dir string, cfg testbackend.Config) (*testbackend.Backend, error) {
	cfg.Tokens = testTokens()
	cfg.Pull = "never"
	return apitest.StartBackend(dir, cfg, true)
}

// ---------------------------------------------------------------- client

// apiClient is the shared client; a request that goes wrong is reported
// with Errorf, so requests may be sent from other goroutines.
type apiClient struct{ *apitest.Client }

func newClient(t *testing.T, base string) *apiClient {
	c := apitest.NewClient(t, base)
	c.Continue = true
	return &apiClient{c}
}

// command runs a shell command in one of account a's sandboxes; the answer
// must be 200.
func (c *apiClient) command(id, cmd string, timeoutMs int) apitest.ExecResult {
	c.T.Helper()
	return c.Command(tokA, id, cmd, timeoutMs)
}

// python runs code with run_code in one of account a's sandboxes.
func (c *apiClient) python(id, code string, timeoutMs int) apitest.ExecResult {
	c.T.Helper()
	return c.pythonAs(tokA, id, code, timeoutMs)
}

// pythonAs is python in a sandbox of tok's account.
func (c *apiClient) pythonAs(tok, id, code string, timeoutMs int) apitest.ExecResult {
	c.T.Helper()
	r := c.Do("POST", "/sandboxes/"+id+"/run_code", tok, map[string]any{"language": "python", "code": code, "timeoutMs": timeoutMs}, nil)
	return apitest.DecodeData[apitest.ExecResult](c.T, r)
}

func (c *apiClient) writeFile(id, path, content string) apitest.Response {
	c.T.Helper()
	return c.Do("PUT", "/sandboxes/"+id+"/files", tokA, map[string]any{"path": path, "content": content}, nil)
}

// ok asserts exit code 0 and returns stdout.
func ok(t *testing.T, what string, r apitest.ExecResult) string {
	t.Helper()
	if r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("%s: %v", what, r)
	}
	return r.Stdout
}

// failed asserts a non-zero exit code.
func failed(t *testing.T, what string, r apitest.ExecResult) {
	t.Helper()
	if r.ExitCode == nil || *r.ExitCode == 0 {
		t.Fatalf("%s: want a failure, got %v", what, r)
	}
}

// The sandbox agent's command, and a variant without its PR_SET_DUMPABLE
// protection (testdata) for tests of the backend's own defences.
const (
	agentPkg         = "./testbackend/cmd/rarecloud-agent"
	dumpableAgentPkg = "./testbackend/isolation/testdata/dumpable-agent"
)

// buildAgent builds a static agent binary from pkg (relative to the module
// root) into dir.
func buildAgent(dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}
