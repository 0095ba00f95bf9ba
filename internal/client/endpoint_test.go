package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestNotFoundOnlyFromTheAPIsEnvelope: a 404 that is not the API's
// envelope with code NOT_FOUND never reads as "not found": it is an
// *EndpointError naming the URL and where it came from.
func TestNotFoundOnlyFromTheAPIsEnvelope(t *testing.T) {
	cases := []struct {
		name, ctype, body, want string
	}{
		{"html", "text/html", "<html><body><h1>404 Not Found</h1></body></html>", "HTTP 404 with an HTML page"},
		{"empty", "", "", "HTTP 404 with an empty body"},
		{"other json", "application/json", `{"error":"Not Found","status":404}`, "HTTP 404 with JSON that is not the API's envelope"},
		{"other json with ok", "application/json", `{"ok":false,"message":"not here"}`, "HTTP 404 with JSON that is not the API's envelope"},
		{"text", "text/plain", "404 page not found\n", "HTTP 404 with a body that is not JSON: 404 page not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(answersProbe(func(w http.ResponseWriter, r *http.Request) {
				if tc.ctype != "" {
					w.Header().Set("Content-Type", tc.ctype)
				}
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c := newTestClient(t, srv, Config{BaseURLSource: "the RARECLOUD_API environment variable"})
			ctx := context.Background()
			_, getErr := c.GetSandbox(ctx, "sbx-1")
			delErr := c.DeleteSandbox(ctx, "sbx-1")
			for _, err := range []error{getErr, delErr} {
				if err == nil || IsNotFound(err) || !IsEndpointError(err) {
					t.Fatalf("err = %v (not found %v); want an endpoint error", err, IsNotFound(err))
				}
				for _, part := range []string{srv.URL + "/v1", "(set by the RARECLOUD_API environment variable)", tc.want} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("%q does not say %q", err.Error(), part)
					}
				}
			}
		})
	}
}

// TestNotFoundEnvelopeWithAnotherCode: the envelope at 404 with a code
// other than NOT_FOUND is an API error, not "not found".
func TestNotFoundEnvelopeWithAnotherCode(t *testing.T) {
	srv := httptest.NewServer(answersProbe(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, errBody("ROUTE_UNKNOWN", "nothing here"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	_, err := c.GetSandbox(context.Background(), "sbx-1")
	if err == nil || IsNotFound(err) || !HasCode(err, "ROUTE_UNKNOWN") {
		t.Fatalf("err = %v", err)
	}
}

// TestNotFoundNeedsAConfirmedEndpoint: a server that answers the API's
// NOT_FOUND envelope on every path (the API under a wrong prefix) is not
// believed; one where GET /sandboxes/templates answers is, and the check
// is made once per client.
func TestNotFoundNeedsAConfirmedEndpoint(t *testing.T) {
	t.Run("every path not found", func(t *testing.T) {
		var probes atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, probePath) {
				probes.Add(1)
			}
			writeJSON(w, 404, errBody("NOT_FOUND", "no route "+r.URL.Path+"; the API lives under /v1"))
		}))
		defer srv.Close()
		c := newTestClient(t, srv, Config{BaseURLSource: `the provider's "api" argument`})
		for i := 0; i < 2; i++ {
			err := c.DeleteSandbox(context.Background(), "sbx-1")
			if err == nil || IsNotFound(err) || !IsEndpointError(err) {
				t.Fatalf("err = %v; want an endpoint error", err)
			}
			for _, part := range []string{`(set by the provider's "api" argument)`, "GET /sandboxes/templates", "HTTP 404 NOT_FOUND"} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("%q does not say %q", err.Error(), part)
				}
			}
		}
		if probes.Load() != 2 {
			t.Errorf("probes = %d; a failed check must be repeated, not remembered", probes.Load())
		}
	})
	for _, probe := range []struct {
		name   string
		status int
		body   map[string]any
	}{
		{"probe answers", 200, okBody([]any{})},
		{"probe lacks scope", 403, errBody("INSUFFICIENT_SCOPE", "token lacks scope services:read")},
	} {
		t.Run(probe.name, func(t *testing.T) {
			var probes atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/v1"+probePath {
					probes.Add(1)
					writeJSON(w, probe.status, probe.body)
					return
				}
				writeJSON(w, 404, errBody("NOT_FOUND", "sandbox not found"))
			}))
			defer srv.Close()
			c := newTestClient(t, srv, Config{})
			for i := 0; i < 3; i++ {
				if _, err := c.GetSandbox(context.Background(), "sbx-1"); !IsNotFound(err) {
					t.Fatalf("err = %v; want not found", err)
				}
			}
			if probes.Load() != 1 {
				t.Errorf("probes = %d, want 1 (the check is remembered)", probes.Load())
			}
		})
	}
}

func TestBaseURLSource(t *testing.T) {
	c, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURLSource() != SourceDefault {
		t.Errorf("source of the default URL = %q", c.BaseURLSource())
	}
	c, err = New(Config{BaseURL: "http://127.0.0.1:1", BaseURLSource: "the RARECLOUD_API_ENDPOINT environment variable"})
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURLSource() != "the RARECLOUD_API_ENDPOINT environment variable" {
		t.Errorf("source = %q", c.BaseURLSource())
	}
}

// TestForeignAnswerOn200: a web server answering 200 with a page is not
// the API either.
func TestForeignAnswerOn200(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<!doctype html><title>Welcome</title>")
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	_, err := c.ListTemplates(context.Background())
	if !IsEndpointError(err) || !strings.Contains(err.Error(), "HTTP 200 with an HTML page") {
		t.Fatalf("err = %v", err)
	}
}

func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestUnreachableMessages: connection refused, an unknown host and a TLS
// failure each say that the API could not be reached at which URL, set
// by what, and what to check.
func TestUnreachableMessages(t *testing.T) {
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, okBody([]any{}))
	}))
	defer tlsSrv.Close()
	plainSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, okBody([]any{}))
	}))
	defer plainSrv.Close()

	unknownHost := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
		},
	}}
	refused := "http://" + closedAddr(t)

	cases := []struct {
		name, url    string
		http         *http.Client
		hint         string
		wantAttempts int64
	}{
		{"refused", refused, nil, "Nothing accepts connections at that address", 3},
		{"unknown host", "https://api.rarecloud.invalid", unknownHost, "The host name does not resolve", 1},
		{"untrusted certificate", tlsSrv.URL, nil, "The TLS handshake failed", 1},
		{"https to a plain server", strings.Replace(plainSrv.URL, "http://", "https://", 1), nil, "The TLS handshake failed", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{
				BaseURL: tc.url, BaseURLSource: "the RARECLOUD_API environment variable", Token: testToken, HTTPClient: tc.http,
				MaxRetries: 2, RetryWaitMin: time.Millisecond, RetryWaitMax: 2 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, info := WithCallInfo(context.Background())
			_, err = c.ListTemplates(ctx)
			if !IsUnreachable(err) {
				t.Fatalf("err = %#v; want an UnreachableError", err)
			}
			want := "could not reach the RareCloud API at " + c.BaseURL() + " (set by the RARECLOUD_API environment variable)"
			for _, part := range []string{want, tc.hint} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("%q does not say %q", err.Error(), part)
				}
			}
			if got := info.Attempts.Load(); got != tc.wantAttempts {
				t.Errorf("attempts = %d, want %d", got, tc.wantAttempts)
			}
			if tc.wantAttempts > 1 && !strings.Contains(err.Error(), "(3 attempts over ") {
				t.Errorf("%q does not say how often it tried", err.Error())
			}
		})
	}
}

// TestRetryTimeBounded: one call stops retrying once its retry time is
// used up, however many retries MaxRetries would allow.
func TestRetryTimeBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 503, errBody("SERVICE_UNAVAILABLE", "down"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{
		MaxRetries: 1000, RetryWaitMin: 10 * time.Millisecond, RetryWaitMax: 10 * time.Millisecond,
		MaxRetryTime: 100 * time.Millisecond,
	})
	ctx, info := WithCallInfo(context.Background())
	_, err := c.ListTemplates(ctx)
	apiErr, ok := AsAPIError(err)
	if !ok || apiErr.Status != 503 {
		t.Fatalf("err = %v", err)
	}
	n := info.Attempts.Load()
	if n < 2 || n > 100 {
		t.Errorf("attempts = %d; want a few retries, bounded by the retry time (MaxRetries allows 1001)", n)
	}
	if apiErr.Attempts != int(n) || !strings.Contains(err.Error(), "gave up after") {
		t.Errorf("the error does not say how often it tried: %v (attempts %d)", err, apiErr.Attempts)
	}
	if DefaultMaxRetryTime > 2*time.Minute {
		t.Errorf("DefaultMaxRetryTime = %v; the documented bound is 2 minutes at most", DefaultMaxRetryTime)
	}
	d, err := New(Config{})
	if err != nil || d.maxRetryTime != DefaultMaxRetryTime {
		t.Errorf("default retry time = %v (%v)", d.maxRetryTime, err)
	}
}

// TestFinal429SaysHowOftenItTried: the error after the last 429 says how
// many attempts over how long.
func TestFinal429SaysHowOftenItTried(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		writeJSON(w, 429, errBody(CodeTooManyRequests, "too many requests"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{MaxRetries: 3})
	_, err := c.ListTemplates(context.Background())
	apiErr, ok := AsAPIError(err)
	if !ok || apiErr.Status != 429 || apiErr.Attempts != 4 {
		t.Fatalf("err = %#v", err)
	}
	if !strings.Contains(err.Error(), "HTTP 429 TOO_MANY_REQUESTS: too many requests (gave up after 4 attempts over ") {
		t.Errorf("message = %q", err.Error())
	}
	var unreachable *UnreachableError
	if errors.As(err, &unreachable) {
		t.Error("a 429 is not unreachable")
	}
}
