package provider

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// lostAnswerProxy is a reverse proxy in front of the acceptance backend
// that loses the answer of the first POST .../commands: it passes the
// command on to the backend (which runs it), throws the backend's answer
// away and answers the provider a bare 503 of its own, as a load balancer
// does when its upstream is slow. Everything else goes through unchanged.
// With hideExtensions it also drops the RareCloud-Extensions header, so
// that the provider sees an API without exec idempotency.
type lostAnswerProxy struct {
	srv            *httptest.Server
	hideExtensions bool
	// busy answers the first busy POST .../commands 429 itself, before
	// anything is passed on.
	busy     atomic.Int64
	lost     atomic.Bool  // the first passed-on command's answer was lost
	commands atomic.Int64 // POST .../commands passed on to the backend
	keyed    atomic.Int64 // of which with an Idempotency-Key

	mu   sync.Mutex
	keys map[string]int // Idempotency-Keys of every POST .../commands, answered or passed on
}

var commandsPathRE = regexp.MustCompile(`^/v1/sandboxes/[^/]+/commands$`)

func newLostAnswerProxy(t *testing.T, hideExtensions bool) *lostAnswerProxy {
	t.Helper()
	backend, err := url.Parse(acc.url)
	if err != nil {
		t.Fatal(err)
	}
	p := &lostAnswerProxy{hideExtensions: hideExtensions, keys: map[string]int{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: backend.Scheme, Host: backend.Host}) // the path keeps its /v1
			if r.In.Method == http.MethodPost && commandsPathRE.MatchString(r.In.URL.Path) {
				p.commands.Add(1)
				if r.In.Header.Get("Idempotency-Key") != "" {
					p.keyed.Add(1)
				}
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if p.hideExtensions {
				resp.Header.Del(client.ExtensionsHeader)
			}
			req := resp.Request
			if req.Method != http.MethodPost || !commandsPathRE.MatchString(req.URL.Path) || !p.lost.CompareAndSwap(false, true) {
				return nil
			}
			// The backend ran the command and answered; the provider never
			// sees that answer.
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			body := "<html><body><h1>503 Service Unavailable</h1>No server is available to handle this request.</body></html>\n"
			resp.StatusCode = http.StatusServiceUnavailable
			resp.Status = "503 Service Unavailable"
			resp.Header = http.Header{"Content-Type": {"text/html"}}
			resp.Body = io.NopCloser(bytes.NewReader([]byte(body)))
			resp.ContentLength = int64(len(body))
			return nil
		},
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && commandsPathRE.MatchString(r.URL.Path) {
			p.mu.Lock()
			p.keys[r.Header.Get("Idempotency-Key")]++
			p.mu.Unlock()
			if p.busy.Add(-1) >= 0 {
				w.Header().Set("Retry-After", "0")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = io.WriteString(w, `{"ok":false,"error":{"code":"TOO_MANY_REQUESTS","message":"too many requests (proxy)"}}`)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// commandKeys are the distinct Idempotency-Keys the commands came with.
func (p *lostAnswerProxy) commandKeys() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.keys)
}

func (p *lostAnswerProxy) providerBlock() string {
	return fmt.Sprintf("provider \"rarecloud\" {\n  api = %q\n}\n", p.srv.URL)
}

// onceSandbox creates a sandbox for one test directly through the API.
func onceSandbox(t *testing.T) (*client.Client, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testClient(tokenA)
	s, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), s.ID) })
	return c, s.ID
}

// countLines reads /home/user/count through the API: how many times the
// command ran.
func countLines(c *client.Client, id string) (int, error) {
	f, err := c.ReadFile(context.Background(), id, "/home/user/count")
	if err != nil {
		return 0, err
	}
	return strings.Count(f.Content, "ran\n"), nil
}

// onceConfig appends a line to /home/user/count and prints how many lines
// the file then has: the run's own result.
func onceConfig(providerBlock, id string) string {
	return providerBlock + fmt.Sprintf(`
resource "rarecloud_sandbox_command" "c" {
  sandbox_id = %q
  command    = "echo ran >> /home/user/count; wc -l < /home/user/count"
}
`, id)
}

// TestAccSandboxCommand_lostAnswerRunsOnce: a proxy passes the command on
// and answers the provider 503. The backend advertises exec idempotency,
// so the provider sent the command with an Idempotency-Key and sends it
// again with the same key: the backend answers with the first run's
// result instead of running it again. The apply succeeds with that result
// (stdout "1") and the file holds exactly one line. Before that, the proxy
// answers 429 more often than one call retries (so the resource calls
// again): every attempt of the run carries the same key.
func TestAccSandboxCommand_lostAnswerRunsOnce(t *testing.T) {
	parallelAcc(t)
	c, id := onceSandbox(t)
	proxy := newLostAnswerProxy(t, false)
	proxy.busy.Store(client.DefaultMaxRetries + 1)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: onceConfig(proxy.providerBlock(), id),
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttr("rarecloud_sandbox_command.c", "stdout", "1\n"),
				resource.TestCheckResourceAttr("rarecloud_sandbox_command.c", "exit_code", "0"),
				func(*terraform.State) error {
					if !proxy.lost.Load() {
						return fmt.Errorf("the proxy lost no answer: the test tested nothing")
					}
					if n, k := proxy.commands.Load(), proxy.keyed.Load(); n != 2 || k != 2 {
						return fmt.Errorf("the proxy passed on %d commands (%d with a key), want the command and its keyed resend", n, k)
					}
					if keys := proxy.commandKeys(); len(keys) != 1 || keys[""] != 0 {
						return fmt.Errorf("the run's attempts came with keys %v, want one key for all of them", keys)
					}
					n, err := countLines(c, id)
					if err != nil {
						return err
					}
					if n != 1 {
						return fmt.Errorf("/home/user/count holds %d lines after one apply, want 1: the command ran %d times", n, n)
					}
					return nil
				},
			),
		}},
	})
}

// TestAccSandboxCommand_lostAnswerWithoutExtension: the same lost answer
// from an API that does not advertise exec idempotency. The provider sends
// no key and does not send the command again: the apply fails saying the
// outcome is unknown (the command may have run), and the file holds
// exactly one line.
func TestAccSandboxCommand_lostAnswerWithoutExtension(t *testing.T) {
	parallelAcc(t)
	c, id := onceSandbox(t)
	proxy := newLostAnswerProxy(t, true)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: onceConfig(proxy.providerBlock(), id),
			ExpectError: expectErr("Error running command in sandbox: outcome unknown", "Sandbox "+id+": the command may have run",
				"HTTP 503", "did not send it again", "Check the sandbox's state"),
		}},
	})
	if n, k := proxy.commands.Load(), proxy.keyed.Load(); n != 1 || k != 0 {
		t.Errorf("the proxy passed on %d commands (%d with a key), want 1 without a key", n, k)
	}
	n, err := countLines(c, id)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("/home/user/count holds %d lines after one apply, want 1", n)
	}
}

// TestOutcomeUnknownDetail: the diagnostic of an unknown outcome names the
// sandbox, the API's code and message, whether the key was used, and what
// to do.
func TestOutcomeUnknownDetail(t *testing.T) {
	apiErr := &client.APIError{Status: 502, Code: client.CodeCommandOutcomeUnknown, Message: "the container engine broke off; the process may have run",
		Method: "POST", Path: "/sandboxes/sbx-abc/commands"}
	keyed := &client.OutcomeUnknownError{Method: "POST", Path: apiErr.Path, Keyed: true, Err: apiErr}
	var diags diag.Diagnostics
	addSandboxUseError(&diags, "Error running command in sandbox", "sbx-abc", keyed)
	if len(diags) != 1 {
		t.Fatalf("diagnostics: %v", diags)
	}
	d := diags[0]
	for _, want := range []string{"Sandbox sbx-abc: the command may have run", "HTTP 502 COMMAND_OUTCOME_UNKNOWN: the container engine broke off",
		"Idempotency-Key", "Check the sandbox's state", "the next apply runs the command again"} {
		if !strings.Contains(d.Detail(), want) {
			t.Errorf("detail lacks %q:\n%s", want, d.Detail())
		}
	}
	if d.Summary() != "Error running command in sandbox: outcome unknown" {
		t.Errorf("summary = %q", d.Summary())
	}
	// The API's code alone (a client that did not wrap it) is an unknown outcome too.
	diags = nil
	addSandboxUseError(&diags, "Error running command in sandbox", "sbx-abc", apiErr)
	if !strings.Contains(diags[0].Summary(), "outcome unknown") || !strings.Contains(diags[0].Detail(), "did not send it again") {
		t.Errorf("bare COMMAND_OUTCOME_UNKNOWN: %s / %s", diags[0].Summary(), diags[0].Detail())
	}
}
