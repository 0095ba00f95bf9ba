package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// fakeExecAPI answers GET /v1/sandboxes/templates (to teach the client the
// extensions) and POST /v1/sandboxes/sbx-1/commands, and counts how many
// times it ran a command. With ext it advertises exec idempotency and
// honours Idempotency-Key as the API does: a request whose key it saw
// before gets the first run's answer, without running again.
type fakeExecAPI struct {
	ext bool
	// fault, when set, answers attempt n (1-based) of the commands route
	// instead of the API when it says it handled it; it calls run first
	// when the command is to have run before that answer.
	fault func(n int, w http.ResponseWriter, run func()) (handled bool)

	mu       sync.Mutex
	posts    int
	runs     int
	keys     []string
	replayed int
	results  map[string]string // by key: the stdout of its first run
}

func (f *fakeExecAPI) serve(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.ext {
			w.Header().Set(ExtensionsHeader, ExtExecIdempotency)
		}
		if r.URL.Path == "/v1/sandboxes/templates" {
			writeJSON(w, 200, okBody([]any{}))
			return
		}
		if r.URL.Path != "/v1/sandboxes/sbx-1/commands" || r.Method != http.MethodPost {
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
			writeJSON(w, 404, errBody(CodeNotFound, "no route"))
			return
		}
		_, _ = io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		f.mu.Lock()
		f.posts++
		n := f.posts
		f.keys = append(f.keys, key)
		f.mu.Unlock()

		run := func() string {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.ext && key != "" {
				if out, ok := f.results[key]; ok {
					f.replayed++
					w.Header().Set("Idempotent-Replayed", "true")
					return out
				}
			}
			f.runs++
			out := "run " + string(rune('0'+f.runs)) + "\n"
			if f.ext && key != "" {
				if f.results == nil {
					f.results = map[string]string{}
				}
				f.results[key] = out
			}
			return out
		}
		if f.fault != nil && f.fault(n, w, func() { run() }) {
			return
		}
		out := run()
		writeJSON(w, 200, okBody(map[string]any{"stdout": out, "stderr": "", "exitCode": 0, "timedOut": false,
			"stdoutTruncated": false, "stderrTruncated": false, "durationMs": 1}))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// learn makes the client read one successful answer, as the provider does
// (it reads the sandbox) before it runs a command.
func learn(t *testing.T, c *Client) {
	t.Helper()
	if _, err := c.ListTemplates(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// bare503 is what a proxy answers: a 503 that is not the API's envelope.
func bare503(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, "<html><body><h1>503 Service Unavailable</h1></body></html>")
}

// TestCommandBare503NotResentWithoutExtension: the API does not advertise
// exec idempotency, so no key is sent, and a 503 that proves nothing (a
// proxy's, after it passed the command on) is not resent: the command
// runs once and the call fails saying its outcome is unknown.
func TestCommandBare503NotResentWithoutExtension(t *testing.T) {
	f := &fakeExecAPI{fault: func(n int, w http.ResponseWriter, run func()) bool {
		if n == 1 {
			run() // the command ran before this answer
			bare503(w)
			return true
		}
		return false
	}}
	c := newTestClient(t, f.serve(t), Config{})
	learn(t, c)
	if c.SupportsExecIdempotency() {
		t.Fatal("the extension is supported by an API that does not name it")
	}
	_, err := c.RunCommand(context.Background(), "sbx-1", CommandRequest{Cmd: "echo ran >> count"})
	if !IsOutcomeUnknown(err) {
		t.Fatalf("err = %v, want an outcome-unknown error", err)
	}
	if !IsUnavailable(err) {
		t.Errorf("err = %v: the 503 is no longer in the chain", err)
	}
	if f.posts != 1 || f.runs != 1 {
		t.Errorf("the command was sent %d times and ran %d times, want once", f.posts, f.runs)
	}
	if f.keys[0] != "" {
		t.Errorf("Idempotency-Key %q sent to an API that does not advertise exec idempotency", f.keys[0])
	}
}

// TestCommandKeyedRetryReturnsFirstRun: the API advertises exec
// idempotency, so the command carries a key; after a proxy's 503 (the
// command ran) the client resends it with the same key and gets the first
// run's answer, and the command ran once.
func TestCommandKeyedRetryReturnsFirstRun(t *testing.T) {
	for name, fault := range map[string]func(w http.ResponseWriter){
		"bare 503":           bare503,
		"bare 502":           func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) },
		"connection dropped": func(w http.ResponseWriter) { hangup(t, w) },
	} {
		t.Run(name, func(t *testing.T) {
			f := &fakeExecAPI{ext: true, fault: func(n int, w http.ResponseWriter, run func()) bool {
				if n == 1 {
					run() // the command ran before this answer
					fault(w)
					return true
				}
				return false
			}}
			c := newTestClient(t, f.serve(t), Config{})
			learn(t, c)
			ctx, info := WithCallInfo(context.Background())
			res, err := c.RunCommandWithKey(ctx, "run-1", "sbx-1", CommandRequest{Cmd: "echo ran >> count"})
			if err != nil {
				t.Fatal(err)
			}
			if f.runs != 1 || f.posts != 2 {
				t.Errorf("sent %d times, ran %d times: want sent twice, ran once", f.posts, f.runs)
			}
			if res.Stdout != "run 1\n" || !info.Replayed.Load() {
				t.Errorf("result %q (replayed %v), want the first run's answer, replayed", res.Stdout, info.Replayed.Load())
			}
			for i, k := range f.keys {
				if k != "run-1" {
					t.Errorf("attempt %d sent key %q, want run-1", i+1, k)
				}
			}
		})
	}
}

// TestCommandNotStartedResent: answers that prove the command did not
// start are resent, with or without a key: 429, SANDBOX_NOT_READY, and a
// 503 SERVICE_UNAVAILABLE from an API whose extension defines that a 503
// means "not started". From an API without the extension, the same 503
// proves nothing and is not resent.
func TestCommandNotStartedResent(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ext    bool
		answer func(w http.ResponseWriter)
		posts  int
	}{
		{"429", false, func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "0")
			writeJSON(w, 429, errBody(CodeTooManyRequests, "busy"))
		}, 2},
		{"not ready", false, func(w http.ResponseWriter) { writeJSON(w, 409, errBody(CodeSandboxNotReady, "starting")) }, 2},
		{"503 with the extension", true, func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "0")
			writeJSON(w, 503, errBody(CodeServiceUnavailable, "engine away"))
		}, 2},
		{"503 without the extension", false, func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "0")
			writeJSON(w, 503, errBody(CodeServiceUnavailable, "engine away"))
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeExecAPI{ext: tc.ext, fault: func(n int, w http.ResponseWriter, run func()) bool {
				if n == 1 {
					tc.answer(w)
					return true
				}
				return false
			}}
			c := newTestClient(t, f.serve(t), Config{})
			learn(t, c)
			_, err := c.RunCommand(context.Background(), "sbx-1", CommandRequest{Cmd: "true"})
			if f.posts != tc.posts {
				t.Fatalf("sent %d times, want %d (err %v)", f.posts, tc.posts, err)
			}
			if tc.posts == 2 && (err != nil || f.runs != 1) {
				t.Errorf("err %v, ran %d times", err, f.runs)
			}
			if tc.posts == 1 && !IsOutcomeUnknown(err) {
				t.Errorf("err %v, want outcome unknown", err)
			}
		})
	}
}

// TestCommandOutcomeUnknownNotResent: the API's COMMAND_OUTCOME_UNKNOWN is
// final even with a key (the API stored it under the key), and a refusal
// such as SANDBOX_NOT_RUNNING is no unknown outcome.
func TestCommandOutcomeUnknownNotResent(t *testing.T) {
	f := &fakeExecAPI{ext: true, fault: func(n int, w http.ResponseWriter, run func()) bool {
		if n == 1 {
			run() // the command ran before this answer
			writeJSON(w, 502, errBody(CodeCommandOutcomeUnknown, "the engine broke off while the command ran; it may have run"))
			return true
		}
		writeJSON(w, 409, errBody(CodeSandboxNotRunning, "sandbox exited"))
		return true
	}}
	c := newTestClient(t, f.serve(t), Config{})
	learn(t, c)
	_, err := c.RunCommand(context.Background(), "sbx-1", CommandRequest{Cmd: "true"})
	var oe *OutcomeUnknownError
	if !IsOutcomeUnknown(err) || !HasCode(err, CodeCommandOutcomeUnknown) || !errors.As(err, &oe) || !oe.Keyed {
		t.Fatalf("err = %v, want COMMAND_OUTCOME_UNKNOWN of a keyed call", err)
	}
	if f.posts != 1 {
		t.Errorf("sent %d times, want once", f.posts)
	}
	_, err = c.RunCommand(context.Background(), "sbx-1", CommandRequest{Cmd: "true"})
	if IsOutcomeUnknown(err) || !IsNotRunning(err) {
		t.Errorf("err = %v, want SANDBOX_NOT_RUNNING, not an unknown outcome", err)
	}
}

// TestCommandKeyedOutcomeStaysUnknown: a keyed call whose first attempt
// may have run stays "may have run" even if the last attempt's answer was
// a refusal.
func TestCommandKeyedOutcomeStaysUnknown(t *testing.T) {
	f := &fakeExecAPI{ext: true, fault: func(n int, w http.ResponseWriter, run func()) bool {
		if n == 1 {
			run() // the command ran before this answer
			bare503(w)
			return true
		}
		w.Header().Set("Retry-After", "0")
		writeJSON(w, 429, errBody(CodeTooManyRequests, "busy"))
		return true
	}}
	c := newTestClient(t, f.serve(t), Config{MaxRetries: 2})
	learn(t, c)
	_, err := c.RunCommand(context.Background(), "sbx-1", CommandRequest{Cmd: "true"})
	if !IsOutcomeUnknown(err) || f.posts != 3 {
		t.Errorf("err %v after %d attempts, want an unknown outcome after 3", err, f.posts)
	}
}

// TestForExecKeepsRetryPolicy: the copy ForExec makes for a long command
// knows what the client learned of the API's extensions and retries as
// the client does: a lost answer of a keyed command is resent with its
// key, and the command runs once.
func TestForExecKeepsRetryPolicy(t *testing.T) {
	f := &fakeExecAPI{ext: true, fault: func(n int, w http.ResponseWriter, run func()) bool {
		if n == 1 {
			run() // the command ran before this answer
			bare503(w)
			return true
		}
		return false
	}}
	c := newTestClient(t, f.serve(t), Config{HTTPClient: &http.Client{Timeout: time.Minute}})
	learn(t, c)
	ec := c.ForExec(1000)
	if ec == c {
		t.Fatal("ForExec did not copy the client: the test shows nothing")
	}
	if _, err := ec.RunCommandWithKey(context.Background(), "run-1", "sbx-1", CommandRequest{Cmd: "true", TimeoutMs: 1000}); err != nil {
		t.Fatal(err)
	}
	if f.posts != 2 || f.runs != 1 || f.keys[0] != "run-1" {
		t.Errorf("sent %d times with keys %q, ran %d times: want sent twice with the key, ran once", f.posts, f.keys, f.runs)
	}
}
