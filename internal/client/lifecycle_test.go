package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// lifecycleServer is a fake API for one sandbox, sbx-1. create and
// del answer POST /sandboxes and DELETE /sandboxes/sbx-1; statuses are
// what successive GETs of sbx-1 answer ("gone": 404 NOT_FOUND), the last
// one repeated. It counts the requests by method.
type lifecycleServer struct {
	mu       sync.Mutex
	create   func(http.ResponseWriter)
	del      func(http.ResponseWriter)
	statuses []string
	// onGet, if set, runs before the answer to the GET numbered n (from
	// 1); it may hold the answer.
	onGet func(n int, r *http.Request)
	gets  int
	seen  map[string]int
}

func (s *lifecycleServer) start(t *testing.T) *Client {
	t.Helper()
	s.seen = map[string]int{}
	srv := httptest.NewServer(answersProbe(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.seen[r.Method]++
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes":
			s.create(w)
		case r.Method == http.MethodDelete && r.URL.Path == "/v1/sandboxes/sbx-1":
			s.del(w)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/sandboxes/sbx-1":
			st := s.statuses[min(s.gets, len(s.statuses)-1)]
			s.gets++
			if s.onGet != nil {
				s.onGet(s.gets, r)
			}
			if st == "gone" {
				writeJSON(w, 404, errBody(CodeNotFound, "sandbox sbx-1 not found"))
				return
			}
			writeJSON(w, 200, okBody(map[string]any{"id": "sbx-1", "status": st, "exitCode": nil}))
		default:
			writeJSON(w, 404, errBody(CodeNotFound, "no route"))
		}
	}))
	t.Cleanup(srv.Close)
	return newTestClient(t, srv, Config{})
}

func (s *lifecycleServer) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[method]
}

func deleted(w http.ResponseWriter) {
	writeJSON(w, 200, okBody(map[string]any{"id": "sbx-1", "deleted": true}))
}

func TestDeleteSandboxAndWaitWaitsUntilGone(t *testing.T) {
	s := &lifecycleServer{del: deleted, statuses: []string{StatusRunning, StatusTerminated, "gone"}}
	c := s.start(t)
	gone, err := c.DeleteSandboxAndWait(context.Background(), "sbx-1")
	if err != nil || gone {
		t.Fatalf("got alreadyGone=%v, %v; want false, nil", gone, err)
	}
	if n := s.count(http.MethodGet); n != 3 {
		t.Errorf("%d GETs, want 3 (running, terminated, 404)", n)
	}
}

func TestDeleteSandboxAndWaitAlreadyGone(t *testing.T) {
	s := &lifecycleServer{del: func(w http.ResponseWriter) {
		writeJSON(w, 404, errBody(CodeNotFound, "sandbox sbx-1 not found"))
	}, statuses: []string{StatusRunning}}
	c := s.start(t)
	gone, err := c.DeleteSandboxAndWait(context.Background(), "sbx-1")
	if err != nil || !gone {
		t.Fatalf("got alreadyGone=%v, %v; want true, nil", gone, err)
	}
	if n := s.count(http.MethodGet); n != 0 {
		t.Errorf("%d GETs of a sandbox already gone, want 0", n)
	}
}

func TestDeleteSandboxAndWaitErrors(t *testing.T) {
	// The delete refused: its own error, not a wait error.
	s := &lifecycleServer{del: func(w http.ResponseWriter) {
		writeJSON(w, 403, errBody(CodeInsufficientScope, "token lacks services:write"))
	}, statuses: []string{StatusRunning}}
	c := s.start(t)
	_, err := c.DeleteSandboxAndWait(context.Background(), "sbx-1")
	if !IsInsufficientScope(err) || IsDeleteWaitError(err) {
		t.Fatalf("err = %v; want INSUFFICIENT_SCOPE, not a wait error", err)
	}

	// Accepted, but still there when ctx ends: a wait error with the
	// wait's own message, wherever in the wait ctx ends. The server ends
	// ctx where each case says, not a clock: a deadline of 300 ms fell
	// during a GET on a slow machine, and could fall before the delete
	// was answered.
	for _, tc := range []struct {
		name   string
		atGet  int  // the GET during which ctx ends
		answer bool // end ctx after answering that GET, not during it
	}{
		{"during the first GET", 1, false},
		{"during a later GET", 2, false},
		{"after a GET's answer", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := newEndingContext()
			s := &lifecycleServer{del: deleted, statuses: []string{StatusRunning}, onGet: func(n int, r *http.Request) {
				if n != tc.atGet {
					return
				}
				if tc.answer {
					// Ended as the answer leaves: the client may be
					// reading it, sleeping, or sending the next GET.
					go func() {
						<-r.Context().Done()
						ctx.end()
					}()
					return
				}
				ctx.end()
				<-r.Context().Done() // the client gave up on this GET
			}}
			c := s.start(t)
			_, err := c.DeleteSandboxAndWait(ctx, "sbx-1")
			var we *DeleteWaitError
			if !errors.As(err, &we) || we.ID != "sbx-1" || !errors.Is(err, context.DeadlineExceeded) ||
				!strings.HasPrefix(err.Error(), "timed out waiting for sandbox sbx-1 to be deleted") {
				t.Fatalf("err = %v; want a *DeleteWaitError for sbx-1 that times out", err)
			}
			if tc.atGet > 1 && !strings.Contains(err.Error(), `(status "running")`) {
				t.Errorf("%q does not give the status last seen", err.Error())
			}
			if n := s.count(http.MethodDelete); n != 1 {
				t.Errorf("%d DELETEs, want 1", n)
			}
		})
	}
}

// endingContext is a context that reaches its deadline when end is
// called rather than at a time, so that a test decides where in a wait
// it falls. Err is then context.DeadlineExceeded, as a deadline's is.
type endingContext struct {
	context.Context
	done chan struct{}
	once sync.Once
}

func newEndingContext() *endingContext {
	return &endingContext{Context: context.Background(), done: make(chan struct{})}
}

func (c *endingContext) end() { c.once.Do(func() { close(c.done) }) }

func (c *endingContext) Done() <-chan struct{} { return c.done }

func (c *endingContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
