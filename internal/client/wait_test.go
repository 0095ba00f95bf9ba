package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// jobServer serves one run-mode sandbox that exits after exitAfter. mode
// says how it treats ?waitFor=: "honour" holds the answer until the status
// is wanted (or timeoutMs is up), "ignore" answers at once, "reject"
// answers 400 INVALID_REQUEST.
func jobServer(t *testing.T, mode string, exitAfter time.Duration) (*httptest.Server, *atomic.Int32, *atomic.Pointer[string]) {
	t.Helper()
	start := time.Now()
	var gets atomic.Int32
	var lastQuery atomic.Pointer[string]
	lastQuery.Store(new(string))
	statusName := func() string {
		if time.Since(start) >= exitAfter {
			return "exited"
		}
		return "running"
	}
	status := func() map[string]any {
		if statusName() == "exited" {
			return map[string]any{"id": "sbx-1", "status": "exited", "runMode": true, "exitCode": 0}
		}
		return map[string]any{"id": "sbx-1", "status": "running", "runMode": true, "exitCode": nil}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		q := r.URL.Query()
		raw := r.URL.RawQuery
		lastQuery.Store(&raw)
		waitFor := q.Get("waitFor")
		switch {
		case waitFor == "" || mode == "ignore":
		case mode == "reject":
			writeJSON(w, 400, errBody("INVALID_REQUEST", "unknown parameter waitFor"))
			return
		default:
			ms, err := strconv.Atoi(q.Get("timeoutMs"))
			if err != nil || ms < 1 || ms > 60000 {
				writeJSON(w, 400, errBody("INVALID_TIMEOUT", "bad timeoutMs"))
				return
			}
			deadline := time.Now().Add(time.Duration(ms) * time.Millisecond)
			for time.Now().Before(deadline) && !strings.Contains(","+waitFor+",", ","+statusName()+",") {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}
		writeJSON(w, 200, okBody(status()))
	}))
	t.Cleanup(srv.Close)
	return srv, &gets, &lastQuery
}

func exitedDone(s *Sandbox) (bool, error) { return s.Status == StatusExited, nil }

// TestWaitUsesTheLongPoll: a wait for exit asks the API to hold the
// answer (waitFor, timeoutMs) and costs a request or two, not a poll
// every PollMax.
func TestWaitUsesTheLongPoll(t *testing.T) {
	srv, gets, query := jobServer(t, "honour", 2*time.Second)
	c := newTestClient(t, srv, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sbx, err := c.WaitSandboxStatus(ctx, "sbx-1", []string{StatusExited, StatusTerminated}, exitedDone)
	if err != nil || sbx.Status != StatusExited {
		t.Fatalf("wait: %+v %v", sbx, err)
	}
	if n := gets.Load(); n > 2 {
		t.Errorf("%d requests for a 2 s job with the long poll; want 1 or 2", n)
	}
	q := *query.Load()
	if !strings.Contains(q, "waitFor=exited%2Cterminated") || !strings.Contains(q, "timeoutMs=") {
		t.Errorf("query = %q", q)
	}
}

// TestWaitLongPollBudgetFollowsTheDeadline: no long poll outlasts ctx.
func TestWaitLongPollBudgetFollowsTheDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if b := longPollBudget(ctx); b <= 0 || b > 5*time.Second-longPollMargin {
		t.Errorf("budget %v for a 5 s deadline", b)
	}
	if b := longPollBudget(context.Background()); b != LongPollMax {
		t.Errorf("budget %v without a deadline", b)
	}
	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	if b := longPollBudget(past); b != time.Millisecond {
		t.Errorf("budget %v after the deadline", b)
	}
}

// TestWaitFallsBackToPolling: a server that ignores or rejects waitFor
// is polled with backoff, and the wait still ends at the exit.
func TestWaitFallsBackToPolling(t *testing.T) {
	for _, mode := range []string{"ignore", "reject"} {
		t.Run(mode, func(t *testing.T) {
			srv, gets, query := jobServer(t, mode, 500*time.Millisecond)
			c := newTestClient(t, srv, Config{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sbx, err := c.WaitSandboxStatus(ctx, "sbx-1", []string{StatusExited, StatusTerminated}, exitedDone)
			if err != nil || sbx.Status != StatusExited {
				t.Fatalf("wait: %+v %v", sbx, err)
			}
			if gets.Load() < 2 {
				t.Errorf("%d requests: the job cannot have exited at the first", gets.Load())
			}
			if mode == "reject" && *query.Load() != "" {
				t.Errorf("after a rejected waitFor the client still sends %q", *query.Load())
			}
		})
	}
}
