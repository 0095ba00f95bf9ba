package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
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
	gets     int
	seen     map[string]int
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
	// wait's own message.
	s = &lifecycleServer{del: deleted, statuses: []string{StatusRunning}}
	c = s.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.DeleteSandboxAndWait(ctx, "sbx-1")
	var we *DeleteWaitError
	if !errors.As(err, &we) || we.ID != "sbx-1" || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.HasPrefix(err.Error(), "timed out waiting for sandbox sbx-1 to be deleted") {
		t.Fatalf("err = %v; want a *DeleteWaitError for sbx-1 that times out", err)
	}
}
