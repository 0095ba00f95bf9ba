package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
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
)

// realBackend is one backend on the real engine shared by the package's
// tests; tests that restart a backend start their own.
func realBackend(t *testing.T) *client {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rarecloud-api-test-") //nolint:usetesting // shared by every test, removed in TestMain
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = startBackend(dir, testbackend.Config{})
	})
	if sharedErr != nil {
		t.Fatalf("start backend: %v", sharedErr)
	}
	return newClient(t, shared.URL())
}

func startBackend(dir string, cfg testbackend.Config) (*testbackend.Backend, error) {
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	if cfg.Tokens == nil {
		cfg.Tokens = testTokens()
	}
	if cfg.Pull == "" {
		cfg.Pull = "never"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := testbackend.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Mode != "test" && cfg.DockerHost == "" {
		// Fail loudly, never skip, when the engine is missing.
		if err := b.Manager().EngineAvailable(ctx); err != nil {
			b.Close()
			return nil, fmt.Errorf("%v (run `make setup` first)", err)
		}
	}
	return b, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	if shared != nil {
		cleanupAll(shared)
		shared.Close()
	}
	os.Exit(code)
}

// cleanupAll deletes what the tests left behind on the shared backend.
func cleanupAll(b *testbackend.Backend) {
	for _, tok := range []string{tokA, tokB} {
		c := &client{base: b.URL(), http: http.DefaultClient}
		var list []map[string]any
		if st, env := c.raw("GET", "/sandboxes", tok, nil, nil); st == 200 {
			_ = json.Unmarshal(env.Data, &list)
		}
		for _, sb := range list {
			if id, ok := sb["id"].(string); ok {
				c.raw("DELETE", "/sandboxes/"+id, tok, nil, nil)
			}
		}
	}
}

var (
	specOnce   sync.Once
	specRouter routers.Router
	specDoc    *openapi3.T
	specErr    error
)

func loadSpec() (*openapi3.T, routers.Router, error) {
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		specDoc, specErr = loader.LoadFromData(api.OpenAPI)
		if specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			return
		}
		// Any host: the backend listens on a random port.
		specDoc.Servers = openapi3.Servers{{URL: "/v1"}}
		specRouter, specErr = legacy.NewRouter(specDoc)
	})
	return specDoc, specRouter, specErr
}

type envelope struct {
	OK     bool            `json:"ok"`
	Mocked bool            `json:"mocked"`
	Data   json.RawMessage `json:"data"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func newClient(t *testing.T, base string) *client {
	return &client{t: t, base: base, http: &http.Client{Timeout: 3 * time.Minute}}
}

type response struct {
	status int
	header http.Header
	env    envelope
}

// do sends a request and validates the response against the OpenAPI
// description; a response the description does not allow fails the test.
func (c *client) do(method, path, token string, body any, hdr map[string]string) response {
	c.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	case string:
		raw = []byte(b)
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
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
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	c.validate(req, resp, data)
	var env envelope
	if err := json.Unmarshal(data, &env); err != nil {
		c.t.Fatalf("%s %s: response is not JSON: %v\n%s", method, path, err, data)
	}
	return response{status: resp.StatusCode, header: resp.Header, env: env}
}

func (c *client) validate(req *http.Request, resp *http.Response, body []byte) {
	c.t.Helper()
	doc, router, err := loadSpec()
	if err != nil {
		c.t.Fatalf("openapi.yaml: %v", err)
	}
	u, _ := url.Parse(req.URL.String())
	vreq := req.Clone(context.Background())
	vreq.URL = &url.URL{Path: u.Path, RawQuery: u.RawQuery}
	vreq.Host = ""
	route, params, err := router.FindRoute(vreq)
	if err != nil {
		// No route in the description (an unknown path or method): the
		// answer must still be the error envelope.
		var v any
		if jerr := json.Unmarshal(body, &v); jerr != nil {
			c.t.Fatalf("%s %s: not JSON: %s", req.Method, req.URL.Path, body)
		}
		if verr := doc.Components.Schemas["ErrorEnvelope"].Value.VisitJSON(v); verr != nil {
			c.t.Fatalf("%s %s: answer is not the error envelope: %v\n%s", req.Method, req.URL.Path, verr, body)
		}
		return
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
		c.t.Fatalf("%s %s: response does not match openapi.yaml: %v\n%s", req.Method, req.URL.Path, err, truncate(body))
	}
}

func truncate(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}

// raw is do without a test: used in cleanup.
func (c *client) raw(method, path, token string, body any, hdr map[string]string) (int, envelope) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, envelope{}
	}
	defer resp.Body.Close()
	var env envelope
	_ = json.NewDecoder(resp.Body).Decode(&env)
	return resp.StatusCode, env
}

// sandbox is the part of the sandbox object tests look at.
type sandbox struct {
	ID                string            `json:"id"`
	Status            string            `json:"status"`
	Template          string            `json:"template"`
	Image             string            `json:"image"`
	CreatedAt         string            `json:"createdAt"`
	ExpiresAt         string            `json:"expiresAt"`
	TimeoutMs         int64             `json:"timeoutMs"`
	RunMode           bool              `json:"runMode"`
	Labels            map[string]string `json:"labels"`
	EnvKeys           []string          `json:"envKeys"`
	ExitCode          *int              `json:"exitCode"`
	TerminationReason string            `json:"terminationReason"`
}

type execResult struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        *int   `json:"exitCode"`
	TimedOut        bool   `json:"timedOut"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
}

func decodeData[T any](t *testing.T, r response) T {
	t.Helper()
	var v T
	if !r.env.OK {
		t.Fatalf("want ok, got %d %+v", r.status, r.env.Error)
	}
	if err := json.Unmarshal(r.env.Data, &v); err != nil {
		t.Fatalf("decode data: %v\n%s", err, r.env.Data)
	}
	return v
}

// expectErr asserts status and code.
func expectErr(t *testing.T, r response, status int, code string) string {
	t.Helper()
	if r.status != status || r.env.OK || r.env.Error == nil || r.env.Error.Code != code {
		var got string
		if r.env.Error != nil {
			got = r.env.Error.Code + ": " + r.env.Error.Message
		}
		t.Fatalf("want %d %s, got %d %q (ok=%v data=%s)", status, code, r.status, got, r.env.OK, r.env.Data)
	}
	return r.env.Error.Message
}

// create makes a sandbox and registers its deletion.
func (c *client) create(token string, body map[string]any) sandbox {
	c.t.Helper()
	r := c.do("POST", "/sandboxes", token, body, nil)
	if r.status != http.StatusCreated {
		c.t.Fatalf("create: want 201, got %d %+v", r.status, r.env.Error)
	}
	sb := decodeData[sandbox](c.t, r)
	c.t.Cleanup(func() { c.raw("DELETE", "/sandboxes/"+sb.ID, token, nil, nil) })
	return sb
}

// waitStatus waits until the sandbox leaves pending (or reaches want),
// with backoff; the deadline fails the test.
func (c *client) waitStatus(token, id string, want ...string) sandbox {
	c.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	wait := 20 * time.Millisecond
	for {
		r := c.do("GET", "/sandboxes/"+id, token, nil, nil)
		sb := decodeData[sandbox](c.t, r)
		for _, w := range want {
			if sb.Status == w {
				return sb
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("sandbox %s: status %s, want %v (reason %q)", id, sb.Status, want, sb.TerminationReason)
		}
		time.Sleep(wait)
		wait = min(wait*2, 500*time.Millisecond)
	}
}

func (c *client) running(token string, body map[string]any) sandbox {
	c.t.Helper()
	sb := c.create(token, body)
	return c.waitStatus(token, sb.ID, "running")
}

// command runs cmd in one of account a's sandboxes.
func (c *client) command(id, cmd string) execResult {
	c.t.Helper()
	r := c.do("POST", "/sandboxes/"+id+"/commands", tokA, map[string]any{"cmd": cmd}, nil)
	return decodeData[execResult](c.t, r)
}

func exitCode(t *testing.T, r execResult) int {
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
