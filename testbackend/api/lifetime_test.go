package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// Tests of the lifetime extensions of v1 (PATCH, idleTimeoutMs,
// termination reasons) that need no container: test mode keeps records,
// timers and activity exactly as real mode does. lifetime_real_test.go
// has the ones that need gVisor.

func testModeBackend(t *testing.T, cfg testbackend.Config) *client {
	t.Helper()
	cfg.Mode = "test"
	b, err := startBackend(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return newClient(t, b.URL())
}

func instant(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("instant %q: %v", s, err)
	}
	return v
}

// msLater waits until the clock has moved past t by a few milliseconds,
// so that instants taken afterwards differ from t at the API's precision.
func msLater(t time.Time) {
	for time.Since(t) < 3*time.Millisecond {
		time.Sleep(time.Millisecond)
	}
}

// TestIdleTimeoutValues: on create and on PATCH, with the product's
// minimum (the backend default), 1..89999 are raised to 90000, values
// above 24 h are clamped, 0 or omitted is off, and anything negative or
// not an integer is 422 INVALID_TIMEOUT.
func TestIdleTimeoutValues(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	cases := []struct {
		raw  string
		want int64 // 0: off
	}{
		{"1", 90000},
		{"89999", 90000},
		{"90000", 90000},
		{"90001", 90001},
		{"86400000", 86400000},
		{"86400001", 86400000},
		{"100000000000000000000000000000", 86400000},
		{"0", 0},
		{"null", 0},
	}
	for _, tc := range cases {
		before := time.Now().UTC().Truncate(time.Millisecond)
		r := c.Do("POST", "/sandboxes", tokA, `{"idleTimeoutMs":`+tc.raw+`}`, nil)
		if r.Status != http.StatusCreated {
			t.Fatalf("create with idleTimeoutMs %s: %v", tc.raw, r)
		}
		sb := apitest.DecodeData[apitest.Sandbox](t, r)
		t.Cleanup(func() { c.Raw("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil) })
		if sb.IdleTimeoutMs != tc.want {
			t.Errorf("create with idleTimeoutMs %s: applied %d, want %d", tc.raw, sb.IdleTimeoutMs, tc.want)
		}
		if tc.want == 0 {
			if sb.IdleExpiresAt != "" {
				t.Errorf("create with idleTimeoutMs %s: idleExpiresAt %q, want none", tc.raw, sb.IdleExpiresAt)
			}
		} else if got := instant(t, sb.IdleExpiresAt); got.Before(before.Add(time.Duration(tc.want) * time.Millisecond)) {
			t.Errorf("create with idleTimeoutMs %s: idleExpiresAt %s is before %s + %d ms", tc.raw, got, before, tc.want)
		}

		// The same value through PATCH, on a sandbox made without one.
		plain := c.Create(tokA, map[string]any{})
		r = c.Do("PATCH", "/sandboxes/"+plain.ID, tokA, `{"idleTimeoutMs":`+tc.raw+`}`, nil)
		if tc.raw == "null" {
			apitest.ExpectErr(t, r, http.StatusBadRequest, "INVALID_REQUEST") // no field with a value
			continue
		}
		if r.Status != http.StatusOK {
			t.Fatalf("PATCH idleTimeoutMs %s: %v", tc.raw, r)
		}
		if got := apitest.DecodeData[apitest.Sandbox](t, r).IdleTimeoutMs; got != tc.want {
			t.Errorf("PATCH idleTimeoutMs %s: applied %d, want %d", tc.raw, got, tc.want)
		}
		if got := c.Get(tokA, plain.ID).IdleTimeoutMs; got != tc.want {
			t.Errorf("GET after PATCH idleTimeoutMs %s: %d, want %d", tc.raw, got, tc.want)
		}
	}
	plain := c.Create(tokA, map[string]any{})
	for _, raw := range []string{"-1", "-90000", "-100000000000000000000000", "1.5", "90000.0", "9e4", `"90000"`, "true", "[90000]", `{}`} {
		msg := apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, `{"idleTimeoutMs":`+raw+`}`, nil), http.StatusUnprocessableEntity, "INVALID_TIMEOUT")
		if !strings.Contains(msg, "idleTimeoutMs") {
			t.Errorf("create with idleTimeoutMs %s: message %q does not name the field", raw, msg)
		}
		apitest.ExpectErr(t, c.Do("PATCH", "/sandboxes/"+plain.ID, tokA, `{"idleTimeoutMs":`+raw+`}`, nil), http.StatusUnprocessableEntity, "INVALID_TIMEOUT")
	}
	if got := c.Get(tokA, plain.ID); got.IdleTimeoutMs != 0 {
		t.Fatalf("refused PATCHes changed the sandbox: %+v", got)
	}
	// Requests without the field are as before: no idle timeout.
	if sb := c.Create(tokA, map[string]any{"timeoutMs": 60000}); sb.IdleTimeoutMs != 0 || sb.IdleExpiresAt != "" {
		t.Fatalf("create without idleTimeoutMs: %+v", sb)
	}
	// The create body's own timeoutMs keeps its v1 answer.
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"timeoutMs": -1}, nil), http.StatusBadRequest, "INVALID_TIMEOUT")
}

// TestPatchSandbox: PATCH changes timeoutMs (counted from createdAt,
// clamped) and idleTimeoutMs of a running sandbox, and refuses every bad
// request without changing anything.
func TestPatchSandbox(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	sb := c.Create(tokA, map[string]any{"timeoutMs": 60000, "labels": map[string]string{"k": "v"}})
	created := instant(t, sb.CreatedAt)
	path := "/sandboxes/" + sb.ID

	// Malformed requests: 400 INVALID_REQUEST.
	for _, body := range []string{"", " ", "{}", "null", "[]", `"x"`, "{", `{"timeoutMs":60000,"x":1}`, `{"timeout_ms":60000}`, `{"timeoutMs":null}`, `{"timeoutMs":60000}{}`, "\xff"} {
		apitest.ExpectErr(t, c.Do("PATCH", path, tokA, body, nil), http.StatusBadRequest, "INVALID_REQUEST")
	}
	// Bad values: 422 INVALID_TIMEOUT.
	for _, body := range []string{`{"timeoutMs":0}`, `{"timeoutMs":-1}`, `{"timeoutMs":-100000000000000000000000}`, `{"timeoutMs":1.5}`, `{"timeoutMs":"60000"}`, `{"timeoutMs":false}`, `{"timeoutMs":120000,"idleTimeoutMs":-1}`, `{"timeoutMs":-1,"idleTimeoutMs":120000}`} {
		apitest.ExpectErr(t, c.Do("PATCH", path, tokA, body, nil), http.StatusUnprocessableEntity, "INVALID_TIMEOUT")
	}
	// A lifetime that would already be over.
	msLater(created)
	msg := apitest.ExpectErr(t, c.Do("PATCH", path, tokA, map[string]any{"timeoutMs": 1}, nil), http.StatusUnprocessableEntity, "INVALID_TIMEOUT")
	if !strings.Contains(msg, "ms ago") || !strings.Contains(msg, sb.ID) {
		t.Errorf("past expiry: message %q does not name the sandbox's age", msg)
	}
	// Scopes, accounts, ids.
	apitest.ExpectErr(t, c.Do("PATCH", path, tokARead, map[string]any{"timeoutMs": 120000}, nil), http.StatusForbidden, "INSUFFICIENT_SCOPE")
	apitest.ExpectErr(t, c.Do("PATCH", path, "", map[string]any{"timeoutMs": 120000}, nil), http.StatusUnauthorized, "UNAUTHORIZED")
	otherMsg := apitest.ExpectErr(t, c.Do("PATCH", path, tokB, map[string]any{"timeoutMs": 120000}, nil), http.StatusNotFound, "NOT_FOUND")
	noneMsg := apitest.ExpectErr(t, c.Do("PATCH", "/sandboxes/sbx-doesnotexist", tokA, map[string]any{"timeoutMs": 120000}, nil), http.StatusNotFound, "NOT_FOUND")
	if strings.Replace(otherMsg, sb.ID, "sbx-doesnotexist", 1) != noneMsg {
		t.Errorf("another account's sandbox answers %q, a missing one %q: they must not differ", otherMsg, noneMsg)
	}
	if got := c.Get(tokA, sb.ID); got.TimeoutMs != 60000 || got.ExpiresAt != sb.ExpiresAt || got.IdleTimeoutMs != 0 {
		t.Fatalf("refused PATCHes changed the sandbox: %+v", got)
	}

	// Good requests: the answer is the sandbox with the applied values.
	for _, tc := range []struct {
		body        map[string]any
		timeout     int64
		idle        int64
		idleExpires bool
	}{
		{map[string]any{"timeoutMs": 600000}, 600000, 0, false},
		{map[string]any{"timeoutMs": 86400001}, 86400000, 0, false},
		{map[string]any{"timeoutMs": 30000, "idleTimeoutMs": 100000}, 30000, 100000, true},
		{map[string]any{"idleTimeoutMs": 0}, 30000, 0, false},
		{map[string]any{"timeoutMs": 1 << 62}, 86400000, 0, false},
	} {
		r := c.Do("PATCH", path, tokAWrite, tc.body, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("PATCH %v: %v", tc.body, r)
		}
		for _, got := range []apitest.Sandbox{apitest.DecodeData[apitest.Sandbox](t, r), c.Get(tokA, sb.ID)} {
			wantExp := created.Add(time.Duration(tc.timeout) * time.Millisecond)
			if got.TimeoutMs != tc.timeout || !instant(t, got.ExpiresAt).Equal(wantExp) || got.IdleTimeoutMs != tc.idle || (got.IdleExpiresAt != "") != tc.idleExpires {
				t.Fatalf("PATCH %v: got timeoutMs %d expiresAt %s idleTimeoutMs %d idleExpiresAt %q; want %d, %s, %d", tc.body, got.TimeoutMs, got.ExpiresAt, got.IdleTimeoutMs, got.IdleExpiresAt, tc.timeout, wantExp.Format(time.RFC3339Nano), tc.idle)
			}
			if got.Status != "running" || got.CreatedAt != sb.CreatedAt || got.Labels["k"] != "v" {
				t.Fatalf("PATCH %v changed more than the timeouts: %+v", tc.body, got)
			}
		}
	}

	// Not running: 409, whatever the body's values.
	job := c.Create(tokA, map[string]any{"cmd": []string{"true"}}) // exits at once in test mode
	if job.Status != "exited" {
		t.Fatalf("test-mode job: %+v", job)
	}
	apitest.ExpectErr(t, c.Do("PATCH", "/sandboxes/"+job.ID, tokA, map[string]any{"timeoutMs": 120000}, nil), http.StatusConflict, "SANDBOX_NOT_RUNNING")

	// Methods: PATCH is listed where the route has it.
	r := c.Do("PUT", path, tokA, map[string]any{"timeoutMs": 120000}, nil)
	apitest.ExpectErr(t, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	if allow := r.Header.Get("Allow"); allow != "GET, PATCH, DELETE" {
		t.Errorf("Allow: %q", allow)
	}
}

// TestPatchMovesExpiry: the expiry timer follows a PATCH, earlier and
// later. Ordering, not the clock, decides: a sandbox made after the
// patched one with the same original lifetime is gone before the
// patched one is checked.
func TestPatchMovesExpiry(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	later := c.Create(tokA, map[string]any{"timeoutMs": 3000})
	earlier := c.Create(tokA, map[string]any{"timeoutMs": 600000})
	witness := c.Create(tokA, map[string]any{"timeoutMs": 3000})

	if r := c.Do("PATCH", "/sandboxes/"+later.ID, tokA, map[string]any{"timeoutMs": 600000}, nil); r.Status != http.StatusOK {
		t.Fatal(r)
	}
	age := time.Since(instant(t, earlier.CreatedAt)).Milliseconds()
	if r := c.Do("PATCH", "/sandboxes/"+earlier.ID, tokA, map[string]any{"timeoutMs": age + 3000}, nil); r.Status != http.StatusOK {
		t.Fatal(r)
	}
	gone := func(id string) func() error {
		return func() error {
			if st, _ := c.Raw("GET", "/sandboxes/"+id, tokA, nil, nil); st != http.StatusNotFound {
				return fmt.Errorf("sandbox %s still answers %d", id, st)
			}
			return nil
		}
	}
	eventually(t, 30*time.Second, gone(earlier.ID)) // a 10-minute lifetime shortened
	eventually(t, 30*time.Second, gone(witness.ID)) // the original lifetime of later is over
	if got := c.Get(tokA, later.ID); got.Status != "running" || got.TimeoutMs != 600000 {
		t.Fatalf("lengthened sandbox after its original expiry: %+v", got)
	}
}

// TestPatchSurvivesRestart: a PATCH is on disk before its answer; after a
// restart the values hold, the timers follow them, and the idle clock
// starts again from the restart.
func TestPatchSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b1, err := startBackend(dir, testbackend.Config{Mode: "test"})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, b1.URL())
	sb := c.Create(tokA, map[string]any{"timeoutMs": 60000})
	short := c.Create(tokA, map[string]any{"timeoutMs": 600000})
	patched := apitest.DecodeData[apitest.Sandbox](t, c.Do("PATCH", "/sandboxes/"+sb.ID, tokA, map[string]any{"timeoutMs": 7200000, "idleTimeoutMs": 3600000}, nil))
	age := time.Since(instant(t, short.CreatedAt)).Milliseconds()
	if r := c.Do("PATCH", "/sandboxes/"+short.ID, tokA, map[string]any{"timeoutMs": age + 3000}, nil); r.Status != http.StatusOK {
		t.Fatal(r)
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now().UTC().Truncate(time.Millisecond)
	b2, err := startBackend(dir, testbackend.Config{Mode: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Close() })
	c = newClient(t, b2.URL())
	got := c.Get(tokA, sb.ID)
	if got.TimeoutMs != 7200000 || got.ExpiresAt != patched.ExpiresAt || got.IdleTimeoutMs != 3600000 {
		t.Fatalf("after a restart: %+v, want the patched values of %+v", got, patched)
	}
	if ie := instant(t, got.IdleExpiresAt); ie.Before(restarted.Add(time.Hour)) {
		t.Fatalf("after a restart idleExpiresAt is %s, want at least the restart (%s) + 1 h", ie, restarted)
	}
	eventually(t, 30*time.Second, func() error {
		if st, _ := c.Raw("GET", "/sandboxes/"+short.ID, tokA, nil, nil); st != http.StatusNotFound {
			return fmt.Errorf("shortened sandbox still answers %d after a restart", st)
		}
		return nil
	})
}

// TestActivityMovesIdleClock: every kind of activity of the sandbox's own
// account moves idleExpiresAt to at least its start + idleTimeoutMs;
// reads of the sandbox itself and another account's requests do not.
func TestActivityMovesIdleClock(t *testing.T) {
	t.Parallel()
	const idle = 60000
	c := testModeBackend(t, testbackend.Config{MinIdleTimeout: time.Second})
	sb := c.Create(tokA, map[string]any{"template": "python", "idleTimeoutMs": idle})
	id := sb.ID
	c.Do("PUT", "/sandboxes/"+id+"/files", tokA, map[string]any{"path": "/home/user/f", "content": "x"}, nil)
	acts := []struct {
		name string
		do   func(tok string) apitest.Response
	}{
		{"command", func(tok string) apitest.Response {
			return c.Do("POST", "/sandboxes/"+id+"/commands", tok, map[string]any{"cmd": "true"}, nil)
		}},
		{"run_code", func(tok string) apitest.Response {
			return c.Do("POST", "/sandboxes/"+id+"/run_code", tok, map[string]any{"language": "python", "code": "1"}, nil)
		}},
		{"file write", func(tok string) apitest.Response {
			return c.Do("PUT", "/sandboxes/"+id+"/files", tok, map[string]any{"path": "/home/user/f", "content": "y"}, nil)
		}},
		{"file read", func(tok string) apitest.Response {
			return c.Do("GET", "/sandboxes/"+id+"/files?path=/home/user/f", tok, nil, nil)
		}},
		{"log read", func(tok string) apitest.Response { return c.Do("GET", "/sandboxes/"+id+"/logs", tok, nil, nil) }},
	}
	for _, a := range acts {
		before := c.Get(tokA, id).IdleExpiresAt
		msLater(instant(t, before).Add(-idle * time.Millisecond))
		// Another account's request is refused and moves nothing.
		apitest.ExpectErr(t, a.do(tokB), http.StatusNotFound, "NOT_FOUND")
		if now := c.Get(tokA, id).IdleExpiresAt; now != before {
			t.Fatalf("%s by another account moved idleExpiresAt from %s to %s", a.name, before, now)
		}
		start := time.Now().UTC().Truncate(time.Millisecond)
		if r := a.do(tokA); r.Status != http.StatusOK {
			t.Fatalf("%s: %v", a.name, r)
		}
		after := c.Get(tokA, id).IdleExpiresAt
		if ie := instant(t, after); ie.Before(start.Add(idle*time.Millisecond)) || after == before {
			t.Fatalf("%s started at %s left idleExpiresAt at %s (was %s), want at least start + %d ms", a.name, start.Format(time.RFC3339Nano), after, before, idle)
		}
	}
	// Reading the sandbox's record, listing and waiting are not activity.
	before := c.Get(tokA, id).IdleExpiresAt
	msLater(instant(t, before).Add(-idle * time.Millisecond))
	c.Do("GET", "/sandboxes", tokA, nil, nil)
	c.Do("GET", "/sandboxes/"+id+"?waitFor=exited&timeoutMs=1", tokA, nil, nil)
	if now := c.Get(tokA, id).IdleExpiresAt; now != before {
		t.Fatalf("reading the record moved idleExpiresAt from %s to %s", before, now)
	}
}

// TestIdleTimeoutEnds: a sandbox left alone ends terminated with reason
// idle_timeout when its idle clock runs out and stays readable; one that
// was used ends no earlier than its last activity + idleTimeoutMs, so
// after the idle one. DELETE of the ended one succeeds; an expiry that
// comes first is still an expiry (gone, 404).
func TestIdleTimeoutEnds(t *testing.T) {
	t.Parallel()
	const idle = 4000 // the command on used must come within it: room for a slow machine
	c := testModeBackend(t, testbackend.Config{MinIdleTimeout: 500 * time.Millisecond, Retention: time.Hour})
	alone := c.Create(tokA, map[string]any{"idleTimeoutMs": idle})
	used := c.Create(tokA, map[string]any{"idleTimeoutMs": idle})
	expiring := c.Create(tokA, map[string]any{"idleTimeoutMs": 600000, "timeoutMs": 1500})
	msLater(instant(t, used.CreatedAt))
	touched := time.Now().UTC().Truncate(time.Millisecond)
	if r := c.Do("POST", "/sandboxes/"+used.ID+"/commands", tokA, map[string]any{"cmd": "true"}, nil); r.Status != http.StatusOK {
		t.Fatalf("command on a sandbox %v after its creation: %v", time.Since(instant(t, used.CreatedAt)), r)
	}

	waitTerminated := func(id string) apitest.Sandbox {
		t.Helper()
		sb := apitest.DecodeData[apitest.Sandbox](t, c.Do("GET", "/sandboxes/"+id+"?waitFor=terminated&timeoutMs=30000", tokA, nil, nil))
		if sb.Status != "terminated" {
			t.Fatalf("sandbox %s after 30 s: %+v", id, sb)
		}
		return sb
	}
	a := waitTerminated(alone.ID)
	if a.TerminationReason != "idle_timeout" || a.TerminatedAt == "" || !strings.Contains(a.TerminationMessage, "idle timeout") || a.IdleExpiresAt != "" {
		t.Fatalf("idle sandbox: %+v", a)
	}
	if end := instant(t, a.TerminatedAt); end.Before(instant(t, alone.IdleExpiresAt)) {
		t.Fatalf("idle sandbox ended at %s, before its idleExpiresAt %s", a.TerminatedAt, alone.IdleExpiresAt)
	}
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes/"+alone.ID+"/commands", tokA, map[string]any{"cmd": "true"}, nil), http.StatusConflict, "SANDBOX_NOT_RUNNING")
	apitest.ExpectErr(t, c.Do("PATCH", "/sandboxes/"+alone.ID, tokA, map[string]any{"idleTimeoutMs": 0}, nil), http.StatusConflict, "SANDBOX_NOT_RUNNING")

	u := waitTerminated(used.ID)
	if u.TerminationReason != "idle_timeout" {
		t.Fatalf("used sandbox: %+v", u)
	}
	if end := instant(t, u.TerminatedAt); end.Before(touched.Add(idle*time.Millisecond)) || !end.After(instant(t, a.TerminatedAt)) {
		t.Fatalf("used sandbox ended at %s: want after its last activity (%s) + %d ms and after the idle one (%s)", u.TerminatedAt, touched.Format(time.RFC3339Nano), idle, a.TerminatedAt)
	}

	eventually(t, 30*time.Second, func() error {
		if st, _ := c.Raw("GET", "/sandboxes/"+expiring.ID, tokA, nil, nil); st != http.StatusNotFound {
			return fmt.Errorf("sandbox past its expiresAt still answers %d", st)
		}
		return nil
	})

	if r := c.Do("DELETE", "/sandboxes/"+alone.ID, tokA, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("DELETE of an idle-terminated sandbox: %v", r)
	}
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes/"+alone.ID, tokA, nil, nil), http.StatusNotFound, "NOT_FOUND")
}
