package isolation

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	rtpkg "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/runtime"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// Every run has its own tokens and canary, so a search for them inside a
// sandbox can only find what this run put there.
var (
	tokA   = "rc_pat_iso_a_" + randomHex(12)
	tokB   = "rc_pat_iso_b_" + randomHex(12)
	canary = "rc-iso-canary-" + randomHex(12)
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
		deleteAll(shared.URL())
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
func engineHost() string { return rtpkg.DefaultHost }

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
		shared, sharedErr = startBackend(filepath.Join(sharedDir, "data"), testbackend.Config{HomeBytes: smallDisk, TmpBytes: smallDisk, Logger: logger})
	})
	if sharedErr != nil {
		t.Fatalf("start backend: %v", sharedErr)
	}
	return newClient(t, shared.URL())
}

func startBackend(dir string, cfg testbackend.Config) (*testbackend.Backend, error) {
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.Tokens = testTokens()
	cfg.Pull = "never"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := testbackend.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w (run `make setup` first)", err)
	}
	if err := b.Manager().EngineAvailable(ctx); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("%v (run `make setup` first)", err)
	}
	return b, nil
}

// deleteAll removes what the tests left on a backend.
func deleteAll(base string) {
	c := &apiClient{base: base, http: &http.Client{Timeout: time.Minute}}
	for _, tok := range []string{tokA, tokB} {
		st, env := c.raw("GET", "/sandboxes", tok, nil)
		if st != http.StatusOK {
			continue
		}
		var list []sandboxView
		_ = json.Unmarshal(env.Data, &list)
		for _, sb := range list {
			c.raw("DELETE", "/sandboxes/"+sb.ID, tok, nil)
		}
	}
}

// ---------------------------------------------------------------- client

var (
	specOnce   sync.Once
	specRouter routers.Router
	specDoc    *openapi3.T
	specErr    error
)

func loadSpec() (*openapi3.T, routers.Router, error) {
	specOnce.Do(func() {
		specDoc, specErr = openapi3.NewLoader().LoadFromData(api.OpenAPI)
		if specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			return
		}
		specDoc.Servers = openapi3.Servers{{URL: "/v1"}}
		specRouter, specErr = legacy.NewRouter(specDoc)
	})
	return specDoc, specRouter, specErr
}

type envelope struct {
	OK    bool            `json:"ok"`
	Data  json.RawMessage `json:"data"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type response struct {
	status  int
	header  http.Header
	env     envelope
	elapsed time.Duration
}

func (r response) errCode() string {
	if r.env.Error == nil {
		return ""
	}
	return r.env.Error.Code
}

func (r response) String() string {
	if r.env.Error != nil {
		return fmt.Sprintf("%d %s: %s", r.status, r.env.Error.Code, r.env.Error.Message)
	}
	return fmt.Sprintf("%d %s", r.status, truncate(r.env.Data, 300))
}

type apiClient struct {
	t    *testing.T
	base string
	http *http.Client
}

func newClient(t *testing.T, base string) *apiClient {
	return &apiClient{t: t, base: base, http: &http.Client{Timeout: 3 * time.Minute}}
}

// do sends a request and validates the answer against openapi.yaml; an
// answer the description does not allow fails the test. It is safe to call
// from other goroutines: it reports with Errorf there, never FailNow.
func (c *apiClient) do(method, path, token string, body any) response {
	c.t.Helper()
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			c.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(raw))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Errorf("%s %s: %v", method, path, err)
		return response{elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	elapsed := time.Since(start)
	if err != nil {
		c.t.Errorf("%s %s: reading the answer: %v", method, path, err)
		return response{status: resp.StatusCode, elapsed: elapsed}
	}
	if verr := validate(req, resp, data); verr != nil {
		c.t.Errorf("%s %s: %v\n%s", method, path, verr, truncate(data, 2000))
	}
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		c.t.Errorf("%s %s: answer is not JSON: %v\n%s", method, path, err, truncate(data, 2000))
	}
	return response{status: resp.StatusCode, header: resp.Header, env: env, elapsed: elapsed}
}

func validate(req *http.Request, resp *http.Response, body []byte) error {
	doc, router, err := loadSpec()
	if err != nil {
		return fmt.Errorf("openapi.yaml: %w", err)
	}
	vreq := req.Clone(context.Background())
	vreq.URL = &url.URL{Path: req.URL.Path, RawQuery: req.URL.RawQuery}
	vreq.Host = ""
	route, params, err := router.FindRoute(vreq)
	if err != nil {
		var v any
		if jerr := json.Unmarshal(body, &v); jerr != nil {
			return fmt.Errorf("not JSON: %w", jerr)
		}
		if verr := doc.Components.Schemas["ErrorEnvelope"].Value.VisitJSON(v); verr != nil {
			return fmt.Errorf("answer is not the error envelope: %w", verr)
		}
		return nil
	}
	input := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status:  resp.StatusCode,
		Header:  resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	input.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), input); err != nil {
		return fmt.Errorf("answer does not match openapi.yaml: %w", err)
	}
	return nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// raw is do without validation or a test, for cleanup.
func (c *apiClient) raw(method, path, token string, body any) (int, envelope) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return 0, envelope{}
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, envelope{}
	}
	defer resp.Body.Close()
	var env envelope
	_ = json.NewDecoder(resp.Body).Decode(&env)
	return resp.StatusCode, env
}

type sandboxView struct {
	ID                string `json:"id"`
	Status            string `json:"status"`
	Template          string `json:"template"`
	Image             string `json:"image"`
	TerminationReason string `json:"terminationReason"`
}

type execResult struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        *int   `json:"exitCode"`
	TimedOut        bool   `json:"timedOut"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
	DurationMs      int64  `json:"durationMs"`
}

func (r execResult) String() string {
	code := "null"
	if r.ExitCode != nil {
		code = fmt.Sprint(*r.ExitCode)
	}
	return fmt.Sprintf("exit %s timedOut=%v stdout %q stderr %q", code, r.TimedOut, truncate([]byte(r.Stdout), 1500), truncate([]byte(r.Stderr), 1500))
}

func decode[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	if !r.env.OK {
		t.Fatalf("want ok, got %v", r)
	}
	if err := json.Unmarshal(r.env.Data, &v); err != nil {
		t.Fatalf("decode data: %v\n%s", err, r.env.Data)
	}
	return v
}

// wantErr asserts an error answer's status and code.
func wantErr(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status || r.env.OK || r.errCode() != code {
		t.Fatalf("want %d %s, got %v", status, code, r)
	}
}

// create makes a sandbox and registers its deletion.
func (c *apiClient) create(token string, body map[string]any) sandboxView {
	c.t.Helper()
	r := c.do("POST", "/sandboxes", token, body)
	if r.status != http.StatusCreated {
		c.t.Fatalf("create %v: want 201, got %v", body, r)
	}
	sb := decode[sandboxView](c.t, r)
	c.t.Cleanup(func() { c.raw("DELETE", "/sandboxes/"+sb.ID, token, nil) })
	return sb
}

func (c *apiClient) get(token, id string) sandboxView {
	c.t.Helper()
	return decode[sandboxView](c.t, c.do("GET", "/sandboxes/"+id, token, nil))
}

// waitStatus waits until the sandbox reaches one of want.
func (c *apiClient) waitStatus(token, id string, timeout time.Duration, want ...string) sandboxView {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	wait := 20 * time.Millisecond
	for {
		sb := c.get(token, id)
		for _, w := range want {
			if sb.Status == w {
				return sb
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("sandbox %s: status %s after %v, want %v (reason %q)", id, sb.Status, timeout, want, sb.TerminationReason)
		}
		time.Sleep(wait)
		wait = min(wait*2, 500*time.Millisecond)
	}
}

// running creates the sandboxes of bodies at once and waits until each runs.
func (c *apiClient) running(token string, bodies ...map[string]any) []sandboxView {
	c.t.Helper()
	out := make([]sandboxView, len(bodies))
	for i, b := range bodies {
		out[i] = c.create(token, b)
	}
	for i := range out {
		out[i] = c.waitStatus(token, out[i].ID, 90*time.Second, "running")
	}
	return out
}

// command runs a shell command in one of account a's sandboxes; the answer
// must be 200.
func (c *apiClient) command(id, cmd string, timeoutMs int) execResult {
	c.t.Helper()
	r := c.do("POST", "/sandboxes/"+id+"/commands", tokA, map[string]any{"cmd": cmd, "timeoutMs": timeoutMs})
	return decode[execResult](c.t, r)
}

// python runs code with run_code in one of account a's sandboxes.
func (c *apiClient) python(id, code string, timeoutMs int) execResult {
	c.t.Helper()
	r := c.do("POST", "/sandboxes/"+id+"/run_code", tokA, map[string]any{"language": "python", "code": code, "timeoutMs": timeoutMs})
	return decode[execResult](c.t, r)
}

func (c *apiClient) writeFile(id, path, content string) response {
	c.t.Helper()
	return c.do("PUT", "/sandboxes/"+id+"/files", tokA, map[string]any{"path": path, "content": content})
}

// ok asserts exit code 0 and returns stdout.
func ok(t *testing.T, what string, r execResult) string {
	t.Helper()
	if r.ExitCode == nil || *r.ExitCode != 0 {
		t.Fatalf("%s: %v", what, r)
	}
	return r.Stdout
}

// failed asserts a non-zero exit code.
func failed(t *testing.T, what string, r execResult) {
	t.Helper()
	if r.ExitCode == nil || *r.ExitCode == 0 {
		t.Fatalf("%s: want a failure, got %v", what, r)
	}
}
