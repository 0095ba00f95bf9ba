// Package apitest is the API test harness shared by the api and isolation
// test suites: a client that sends requests to a backend and validates every
// answer against openapi.yaml, decoding answers into the backend's own
// types (api.Envelope, sandbox.View, sandbox.ExecOutput: no third copy),
// the sandbox helpers, and starting a backend on a free loopback port.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/apispec"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// WaitTimeout is how long Running waits for a sandbox to run.
const WaitTimeout = 90 * time.Second

// StartBackend starts a backend listening on a free loopback port with its
// data in dir; Pull is "never" unless cfg sets it. With checkEngine, a
// missing container engine is an error (tests fail loudly, never skip), and
// the errors say to run `make setup`.
func StartBackend(dir string, cfg testbackend.Config, checkEngine bool) (*testbackend.Backend, error) {
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = dir
	if cfg.Pull == "" {
		cfg.Pull = "never"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := testbackend.New(ctx, cfg)
	if err != nil {
		if checkEngine {
			return nil, fmt.Errorf("%w (run `make setup` first)", err)
		}
		return nil, err
	}
	if checkEngine {
		if err := b.Manager().EngineAvailable(ctx); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("%v (run `make setup` first)", err)
		}
	}
	return b, nil
}

// RawMismatches counts answers to DeleteAll that did not match
// openapi.yaml; a TestMain that calls DeleteAll fails the run when it is
// not zero.
var RawMismatches atomic.Int64

// DeleteAll deletes the sandboxes of tokens on the backend at base, for
// cleanup: failed requests are no error, answers that do not match
// openapi.yaml are counted in RawMismatches. timeout bounds each request
// (0: none).
func DeleteAll(base string, timeout time.Duration, tokens ...string) {
	c := &Client{Base: base, HTTP: &http.Client{Timeout: timeout}}
	for _, tok := range tokens {
		st, env := c.Raw("GET", "/sandboxes", tok, nil, nil)
		if st != http.StatusOK {
			continue
		}
		var list []Sandbox
		_ = json.Unmarshal(env.Data, &list)
		for _, sb := range list {
			c.Raw("DELETE", "/sandboxes/"+sb.ID, tok, nil, nil)
		}
	}
}

// Validate checks an answer against openapi.yaml (see apispec.Validate).
func Validate(req *http.Request, resp *http.Response, body []byte) error {
	return apispec.Validate(req, resp.StatusCode, resp.Header, body)
}

// Truncate shortens b to n bytes for a message.
func Truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// Envelope is every answer's body, as the backend writes it (the
// backend's own type, its data kept raw for DecodeData).
type Envelope = api.Envelope[json.RawMessage]

// Response is an answer as the tests see it.
type Response struct {
	Status  int
	Header  http.Header
	Env     Envelope
	Elapsed time.Duration
}

// ErrCode is the error code of an error answer, else "".
func (r Response) ErrCode() string {
	if r.Env.Error == nil {
		return ""
	}
	return r.Env.Error.Code
}

func (r Response) String() string {
	if r.Env.Error != nil {
		return fmt.Sprintf("%d %s: %s", r.Status, r.Env.Error.Code, r.Env.Error.Message)
	}
	return fmt.Sprintf("%d %s", r.Status, Truncate(r.Env.Data, 300))
}

// Sandbox is the sandbox object: the backend's own view, not a copy, so
// that the tests read what the backend writes (openapi.yaml checks it on
// the wire).
type Sandbox = sandbox.View

// ExecResult is the answer to a command or run_code: the backend's own
// ExecOutput, with a String for test messages.
type ExecResult struct{ sandbox.ExecOutput }

func (r ExecResult) String() string {
	code := "null"
	if r.ExitCode != nil {
		code = fmt.Sprint(*r.ExitCode)
	}
	return fmt.Sprintf("exit %s timedOut=%v stdout %q stderr %q", code, r.TimedOut, Truncate([]byte(r.Stdout), 1500), Truncate([]byte(r.Stderr), 1500))
}

// DecodeData asserts an ok answer and decodes its data.
func DecodeData[T any](t testing.TB, r Response) T {
	t.Helper()
	var v T
	if !r.Env.OK {
		t.Fatalf("want ok, got %v", r)
	}
	if err := json.Unmarshal(r.Env.Data, &v); err != nil {
		t.Fatalf("decode data: %v\n%s", err, r.Env.Data)
	}
	return v
}

// ExpectErr asserts an error answer's status and code, and returns its
// message.
func ExpectErr(t testing.TB, r Response, status int, code string) string {
	t.Helper()
	if r.Status != status || r.Env.OK || r.ErrCode() != code || r.Env.Error == nil {
		t.Fatalf("want %d %s, got %v (ok=%v)", status, code, r, r.Env.OK)
	}
	return r.Env.Error.Message
}

// Client talks to one backend for one test.
type Client struct {
	T    testing.TB
	Base string
	HTTP *http.Client
	// Continue makes Do report a failed request or an answer that does not
	// match openapi.yaml with Errorf and go on, so that Do may be called
	// from other goroutines; otherwise it fails the test at once.
	Continue bool
}

// NewClient is a client for the backend at base; Do fails t at once.
func NewClient(t testing.TB, base string) *Client {
	return &Client{T: t, Base: base, HTTP: &http.Client{Timeout: 3 * time.Minute}}
}

func (c *Client) fail(format string, args ...any) {
	c.T.Helper()
	if c.Continue {
		c.T.Errorf(format, args...)
		return
	}
	c.T.Fatalf(format, args...)
}

// Do sends a request and validates the answer against openapi.yaml; an
// answer the description does not allow fails the test. body is sent as is
// when it is a []byte or a string, else as JSON; hdr adds headers.
func (c *Client) Do(method, path, token string, body any, hdr map[string]string) Response {
	c.T.Helper()
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
			c.T.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, c.Base+path, bytes.NewReader(raw))
	if err != nil {
		c.T.Fatal(err)
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
	start := time.Now()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		c.fail("%s %s: %v", method, path, err)
		return Response{Elapsed: time.Since(start)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	elapsed := time.Since(start)
	if err != nil {
		c.fail("%s %s: reading the answer: %v", method, path, err)
		return Response{Status: resp.StatusCode, Elapsed: elapsed}
	}
	if verr := Validate(req, resp, data); verr != nil {
		c.fail("%s %s: %v\n%s", method, path, verr, Truncate(data, 2000))
	}
	var env Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		c.fail("%s %s: answer is not JSON: %v\n%s", method, path, err, Truncate(data, 2000))
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Env: env, Elapsed: elapsed}
}

// Raw is Do for cleanup and for requests that may get no answer (a
// backend killed under them): a request that fails is no error, but an
// answer that comes back must still match openapi.yaml (reported with
// Errorf, so Raw may run in cleanups and, while the test runs, in other
// goroutines).
func (c *Client) Raw(method, path, token string, body any, hdr map[string]string) (int, Envelope) {
	if c.T != nil {
		c.T.Helper()
	}
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, err := http.NewRequest(method, c.Base+path, bytes.NewReader(raw))
	if err != nil {
		return 0, Envelope{}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, Envelope{}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, Envelope{}
	}
	if verr := Validate(req, resp, data); verr != nil {
		if c.T == nil { // DeleteAll, after the tests: say so, the run fails
			fmt.Fprintf(os.Stderr, "%s %s: %v\n%s\n", method, path, verr, Truncate(data, 2000))
			RawMismatches.Add(1)
		} else {
			c.T.Errorf("%s %s: %v\n%s", method, path, verr, Truncate(data, 2000))
		}
	}
	var env Envelope
	_ = json.Unmarshal(data, &env)
	return resp.StatusCode, env
}

// Create makes a sandbox and registers its deletion.
func (c *Client) Create(token string, body map[string]any) Sandbox {
	c.T.Helper()
	r := c.Do("POST", "/sandboxes", token, body, nil)
	if r.Status != http.StatusCreated {
		c.T.Fatalf("create %v: want 201, got %v", body, r)
	}
	sb := DecodeData[Sandbox](c.T, r)
	c.T.Cleanup(func() { c.Raw("DELETE", "/sandboxes/"+sb.ID, token, nil, nil) })
	return sb
}

// Get reads a sandbox.
func (c *Client) Get(token, id string) Sandbox {
	c.T.Helper()
	return DecodeData[Sandbox](c.T, c.Do("GET", "/sandboxes/"+id, token, nil, nil))
}

// WaitStatus waits, with backoff, until the sandbox reaches one of want;
// the deadline fails the test.
func (c *Client) WaitStatus(token, id string, timeout time.Duration, want ...string) Sandbox {
	c.T.Helper()
	deadline := time.Now().Add(timeout)
	wait := 20 * time.Millisecond
	for {
		sb := c.Get(token, id)
		for _, w := range want {
			if sb.Status == w {
				return sb
			}
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("sandbox %s: status %s after %v, want %v (reason %q)", id, sb.Status, timeout, want, sb.TerminationReason)
		}
		time.Sleep(wait)
		wait = min(wait*2, 500*time.Millisecond)
	}
}

// Running creates a sandbox and waits until it runs.
func (c *Client) Running(token string, body map[string]any) Sandbox {
	c.T.Helper()
	return c.RunningAll(token, body)[0]
}

// RunningAll creates the sandboxes of bodies at once and waits until each
// runs.
func (c *Client) RunningAll(token string, bodies ...map[string]any) []Sandbox {
	c.T.Helper()
	out := make([]Sandbox, len(bodies))
	for i, b := range bodies {
		out[i] = c.Create(token, b)
	}
	for i := range out {
		out[i] = c.WaitStatus(token, out[i].ID, WaitTimeout, "running")
	}
	return out
}

// Command runs a shell command in a sandbox; the answer must be ok.
// timeoutMs 0 leaves the command's timeout to the backend.
func (c *Client) Command(token, id, cmd string, timeoutMs int) ExecResult {
	c.T.Helper()
	body := map[string]any{"cmd": cmd}
	if timeoutMs != 0 {
		body["timeoutMs"] = timeoutMs
	}
	return DecodeData[ExecResult](c.T, c.Do("POST", "/sandboxes/"+id+"/commands", token, body, nil))
}
