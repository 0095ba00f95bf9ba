package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// clientCalls is one call of every client method that sends a request,
// with every optional field set, so that all of it meets the spec.
func clientCalls() map[string]func(context.Context, *Client) error {
	const id = "sbx-abcdefg"
	return map[string]func(context.Context, *Client) error{
		"ListTemplates": func(ctx context.Context, c *Client) error { _, err := c.ListTemplates(ctx); return err },
		"CreateSandbox": func(ctx context.Context, c *Client) error {
			_, err := c.CreateSandbox(ctx, CreateSandboxRequest{
				Template: "python", Image: "python:3.12-slim", TimeoutMs: 60000, Run: true,
				Entrypoint: []string{"python3"}, Cmd: []string{"-c", "print(1)"},
				Env: map[string]string{"A": "1"}, Labels: map[string]string{"ci": "1"},
				EgressMode: "ALLOW_LIST", EgressAllowlist: []string{"pypi.example.test", "*.example.test"}, IdleTimeoutMs: 90000,
			})
			return err
		},
		"UpdateSandbox": func(ctx context.Context, c *Client) error {
			timeout, idle := int64(600000), int64(90000)
			_, err := c.UpdateSandbox(ctx, id, UpdateSandboxRequest{TimeoutMs: &timeout, IdleTimeoutMs: &idle})
			return err
		},
		"CreateSandboxWithKey": func(ctx context.Context, c *Client) error {
			_, err := c.CreateSandboxWithKey(ctx, "key-1", CreateSandboxRequest{})
			return err
		},
		"GetSandbox": func(ctx context.Context, c *Client) error { _, err := c.GetSandbox(ctx, id); return err },
		"ListSandboxes": func(ctx context.Context, c *Client) error {
			_, err := c.ListSandboxes(ctx, map[string]string{"a": "1", "b": "2"})
			return err
		},
		"WaitSandboxStatus": func(ctx context.Context, c *Client) error {
			_, err := c.WaitSandboxStatus(ctx, id, []string{StatusRunning, StatusExited}, nil)
			return err
		},
		"DeleteSandbox": func(ctx context.Context, c *Client) error { return c.DeleteSandbox(ctx, id) },
		"RunCode": func(ctx context.Context, c *Client) error {
			_, err := c.RunCode(ctx, id, RunCodeRequest{Language: "python", Code: "print(1)", TimeoutMs: 1000})
			return err
		},
		"RunCommand": func(ctx context.Context, c *Client) error {
			_, err := c.RunCommand(ctx, id, CommandRequest{Cmd: "true", TimeoutMs: 1000})
			return err
		},
		"RunCodeWithKey": func(ctx context.Context, c *Client) error {
			c.ext.execIdempotency.Store(extPresent) // so that the key is sent
			_, err := c.RunCodeWithKey(ctx, "key-1", id, RunCodeRequest{Language: "python", Code: "print(1)", TimeoutMs: 1000})
			return err
		},
		"RunCommandWithKey": func(ctx context.Context, c *Client) error {
			c.ext.execIdempotency.Store(extPresent)
			_, err := c.RunCommandWithKey(ctx, "key-1", id, CommandRequest{Cmd: "true", TimeoutMs: 1000})
			return err
		},
		"WriteFile": func(ctx context.Context, c *Client) error {
			_, err := c.WriteFile(ctx, id, "/home/user/a", "x")
			return err
		},
		"ReadFile": func(ctx context.Context, c *Client) error { _, err := c.ReadFile(ctx, id, "/home/user/a"); return err },
		"Logs":     func(ctx context.Context, c *Client) error { _, err := c.Logs(ctx, id); return err },
	}
}

// Headers every request may carry without the spec naming them.
var standardHeaders = []string{"Accept", "Accept-Encoding", "Authorization", "Content-Length", "Content-Type", "User-Agent"}

// TestRequestsMatchTheSpec: every request the client sends is a route of
// openapi.yaml, with a body its schema accepts and only the query and
// header parameters it declares.
func TestRequestsMatchTheSpec(t *testing.T) {
	doc := loadSpec(t)
	check := requestChecker(t, doc)
	for name, call := range clientCalls() {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var probs []string
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n++
				probs = append(probs, check(r)...)
				mu.Unlock()
				// An answer that ends the call at once: the answers are the
				// wire-type test's business.
				writeJSON(w, http.StatusBadRequest, errBody(CodeInvalidRequest, "contract test"))
			}))
			defer srv.Close()
			c := newTestClient(t, srv, Config{})
			_ = call(context.Background(), c)
			mu.Lock()
			defer mu.Unlock()
			if n == 0 {
				t.Fatal("no request reached the server")
			}
			for _, p := range probs {
				t.Error(p)
			}
		})
	}
}

// TestEveryCallIsInTheContract: every exported method that sends a
// request itself (calls c.do) is in clientCalls.
func TestEveryCallIsInTheContract(t *testing.T) {
	calls := clientCalls()
	n := 0
	for _, name := range parsePackage(t).senders {
		n++
		if _, ok := calls[name]; !ok {
			t.Errorf("Client.%s sends requests but is not in clientCalls(): add a call with every optional field set", name)
		}
	}
	if n < 10 {
		t.Fatalf("found %d exported methods that call c.do: the parse went wrong", n)
	}
}

// requestChecker returns a function that lists what is wrong with a
// request against doc.
func requestChecker(t *testing.T, doc *openapi3.T) func(*http.Request) []string {
	t.Helper()
	doc.Servers = openapi3.Servers{{URL: "/v1"}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return func(r *http.Request) []string {
		vreq := r.Clone(context.Background())
		vreq.URL = &url.URL{Path: r.URL.Path, RawQuery: r.URL.RawQuery}
		vreq.Host = ""
		vreq.Body = r.Body
		what := r.Method + " " + r.URL.Path
		route, params, err := router.FindRoute(vreq)
		if err != nil {
			return []string{fmt.Sprintf("%s: not a route of openapi.yaml: %v", what, err)}
		}
		var probs []string
		declared := map[string]map[string]bool{"query": {}, "header": {}}
		for _, p := range append(slices.Clone(route.PathItem.Parameters), route.Operation.Parameters...) {
			if m := declared[p.Value.In]; m != nil {
				m[http.CanonicalHeaderKey(p.Value.Name)] = true
				m[p.Value.Name] = true
			}
		}
		for k := range r.URL.Query() {
			if !declared["query"][k] {
				probs = append(probs, fmt.Sprintf("%s: query parameter %q is not in openapi.yaml", what, k))
			}
		}
		for k := range r.Header {
			if !declared["header"][k] && !slices.Contains(standardHeaders, k) {
				probs = append(probs, fmt.Sprintf("%s: header %q is not in openapi.yaml", what, k))
			}
		}
		in := &openapi3filter.RequestValidationInput{
			Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
		}
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			probs = append(probs, fmt.Sprintf("%s: %s", what, strings.ReplaceAll(err.Error(), "\n", " ")))
		}
		return probs
	}
}
