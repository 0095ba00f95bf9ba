package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// TestAuthMatrix: every route × every kind of caller, with the status and
// code each must get.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	owned := c.Running(tokA, map[string]any{"template": "python"}).ID
	// Each successful DELETE needs a sandbox of its own.
	victim := func(tok string) string { return c.Running(tok, map[string]any{}).ID }

	type route struct {
		method, path string
		body         any
		ok           int // status for a caller with the right scope on its own sandbox
	}
	routes := []route{
		{"GET", "/sandboxes/templates", nil, 200},
		{"GET", "/sandboxes", nil, 200},
		{"POST", "/sandboxes", map[string]any{"labels": map[string]string{"matrix": "1"}}, 201},
		{"GET", "/sandboxes/{id}", nil, 200},
		{"POST", "/sandboxes/{id}/run_code", map[string]any{"language": "python", "code": "print(1)"}, 200},
		{"POST", "/sandboxes/{id}/commands", map[string]any{"cmd": "true"}, 200},
		{"PUT", "/sandboxes/{id}/files", map[string]any{"path": "/tmp/m", "content": "m"}, 200},
		{"GET", "/sandboxes/{id}/files?path=/etc/hostname", nil, 200},
		{"GET", "/sandboxes/{id}/logs", nil, 200},
		{"POST", "/sandboxes/{id}/ports/80", nil, 501},
		{"DELETE", "/sandboxes/{id}", nil, 200},
	}
	callers := []struct {
		name, token string
		read, write bool
		other       bool
	}{
		{"no token", "", false, false, false},
		{"unknown token", "rc_pat_unknown", false, false, false},
		{"read only", tokARead, true, false, false},
		{"write only", tokAWrite, false, true, false},
		{"read and write", tokA, true, true, false},
		{"other account", tokB, true, true, true},
	}
	for _, rt := range routes {
		for _, who := range callers {
			path := rt.path
			target := owned
			if rt.method == "DELETE" && (who.write && !who.other) {
				target = victim(tokA)
			}
			path = replaceID(path, target)
			r := c.Do(rt.method, path, who.token, rt.body, nil)
			needRead := rt.method == "GET"
			var wantStatus int
			var wantCode string
			switch {
			case who.token == "" || !who.read && !who.write:
				wantStatus, wantCode = 401, "UNAUTHORIZED"
			case needRead && !who.read, !needRead && !who.write:
				wantStatus, wantCode = 403, "INSUFFICIENT_SCOPE"
			case who.other && rt.path != "/sandboxes" && rt.path != "/sandboxes/templates":
				wantStatus, wantCode = 404, "NOT_FOUND"
			default:
				wantStatus = rt.ok
				if rt.ok == 501 {
					wantCode = "NOT_IMPLEMENTED"
				}
			}
			label := fmt.Sprintf("%s %s as %s", rt.method, rt.path, who.name)
			if r.Status != wantStatus {
				t.Errorf("%s: status %d, want %d (%+v)", label, r.Status, wantStatus, r.Env.Error)
				continue
			}
			if wantCode != "" && (r.Env.Error == nil || r.Env.Error.Code != wantCode) {
				t.Errorf("%s: error %+v, want %s", label, r.Env.Error, wantCode)
			}
			if r.Status == 201 {
				sb := apitest.DecodeData[apitest.Sandbox](t, r)
				tok := who.token
				t.Cleanup(func() { c.Raw("DELETE", "/sandboxes/"+sb.ID, tok, nil, nil) })
			}
		}
	}
}

func replaceID(path, id string) string {
	out := ""
	for i := 0; i < len(path); i++ {
		if i+4 <= len(path) && path[i:i+4] == "{id}" {
			out += id
			i += 3
			continue
		}
		out += string(path[i])
	}
	return out
}

// TestConcurrencyLimit: past the per-account limit a request waits its
// bounded time in line, then the API answers 429 with Retry-After; other
// accounts are not affected.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	const queueWait = 300 * time.Millisecond
	b, err := startBackend(t.TempDir(), testbackend.Config{MaxInFlight: 2, QueueWait: queueWait})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := newClient(t, b.URL())
	id := c.Running(tokA, map[string]any{}).ID
	defer c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Holds a slot for at least 10 s: it cannot end sooner.
			c.Raw("POST", "/sandboxes/"+id+"/commands", tokA, map[string]any{"cmd": "sleep 10"}, nil)
		}()
	}
	// Within those 10 s both slots are taken: some GET must queue for
	// queueWait and then be refused.
	var r apitest.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		t0 := time.Now()
		r = c.Do("GET", "/sandboxes/"+id, tokA, nil, nil)
		if r.Status == http.StatusTooManyRequests {
			if waited := time.Since(t0); waited < queueWait {
				t.Errorf("refused after %s, before its %s in line", waited, queueWait)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 429 while two 10 s commands held both slots; last answer %d", r.Status)
		}
	}
	apitest.ExpectErr(t, r, http.StatusTooManyRequests, "TOO_MANY_REQUESTS")
	if r.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	if r := c.Do("GET", "/sandboxes", tokB, nil, nil); r.Status != 200 {
		t.Fatalf("other account limited too: %d", r.Status)
	}
	wg.Wait()
	if r := c.Do("GET", "/sandboxes/"+id, tokA, nil, nil); r.Status != 200 {
		t.Fatalf("limit not released: %d", r.Status)
	}
}

// TestLongPollsHoldNoSlot: a long poll (GET ?waitFor=) gives its slot
// back while it waits, so waits cannot stall the account's line; instead
// at most 4 × the limit of them wait at once, and one more is refused at
// once with 429.
func TestLongPollsHoldNoSlot(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{MaxInFlight: 1, QueueWait: 300 * time.Millisecond})
	id := c.Running(tokA, map[string]any{}).ID
	const waits = 4 // 4 × MaxInFlight
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil) // ends the waits
	for range waits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Arriving together on one slot, some may be refused by the
			// line's length bound: they come back, as a client does.
			for c.Do("GET", "/sandboxes/"+id+"?waitFor=exited&timeoutMs=20000", tokA, nil, nil).Status == http.StatusTooManyRequests {
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	// Once all of them wait, one more wait is refused at once, for that
	// reason (not the line's).
	tooManyWaits := func(r apitest.Response) bool {
		return r.Status == http.StatusTooManyRequests && r.Env.Error != nil && strings.Contains(r.Env.Error.Message, "too many waits")
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		r := c.Do("GET", "/sandboxes/"+id+"?waitFor=exited&timeoutMs=1", tokA, nil, nil)
		if tooManyWaits(r) {
			apitest.ExpectErr(t, r, http.StatusTooManyRequests, "TOO_MANY_REQUESTS")
			if r.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a wait past %d waiting ones was never refused as too many waits; last answer %s", waits, r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// While they wait, the account's one slot is free: a request is served,
	// not queued behind them and refused.
	if r := c.Do("GET", "/sandboxes/"+id, tokA, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("GET while %d long polls waited on a limit of 1: %d %s, want 200", waits, r.Status, r.ErrCode())
	}
}
