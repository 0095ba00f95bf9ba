package api_test

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// hugeNumberBody is a body of exactly api.MaxBodyBytes that is one number
// literal in field: {"field":1111…}.
func hugeNumberBody(field string) string {
	head := `{"` + field + `":`
	return head + strings.Repeat("1", api.MaxBodyBytes-len(head)-1) + "}"
}

// TestLongNumbersAreRefusedUnread: a number literal longer than
// api.MaxNumberLen, anywhere in any body, is refused before anything
// parses it (422 INVALID_TIMEOUT in a timeout field, 400 INVALID_REQUEST
// elsewhere), at the body limit too, and the message does not echo it;
// MaxNumberLen characters are still read as before.
func TestLongNumbersAreRefusedUnread(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	id := c.Create(tokA, map[string]any{}).ID
	long := strings.Repeat("1", api.MaxNumberLen+1)
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"PATCH", "/sandboxes/sbx-none", hugeNumberBody("timeoutMs"), 422, "INVALID_TIMEOUT"},
		{"PATCH", "/sandboxes/" + id, hugeNumberBody("timeoutMs"), 422, "INVALID_TIMEOUT"},
		{"PATCH", "/sandboxes/" + id, hugeNumberBody("idleTimeoutMs"), 422, "INVALID_TIMEOUT"},
		{"POST", "/sandboxes", hugeNumberBody("timeoutMs"), 422, "INVALID_TIMEOUT"},
		{"POST", "/sandboxes", hugeNumberBody("idleTimeoutMs"), 422, "INVALID_TIMEOUT"},
		{"PATCH", "/sandboxes/" + id, `{"timeoutMs":` + long + `}`, 422, "INVALID_TIMEOUT"},
		{"PATCH", "/sandboxes/" + id, `{"idleTimeoutMs":-` + long + `}`, 422, "INVALID_TIMEOUT"},
		{"PATCH", "/sandboxes/" + id, `{"timeoutMs":60000,"idleTimeoutMs":0.` + long + `}`, 422, "INVALID_TIMEOUT"},
		{"POST", "/sandboxes", `{"timeoutMs":1` + strings.Repeat("0", api.MaxNumberLen) + `e-30}`, 422, "INVALID_TIMEOUT"},
		{"POST", "/sandboxes/" + id + "/commands", `{"cmd":"true","timeoutMs":` + long + `}`, 422, "INVALID_TIMEOUT"},
		{"POST", "/sandboxes/" + id + "/run_code", `{"language":"python","code":"1","timeoutMs":` + long + `}`, 422, "INVALID_TIMEOUT"},
		// Not a timeout field: the body is malformed whatever the number.
		{"POST", "/sandboxes", `{"labels":{"k":` + long + `}}`, 400, "INVALID_REQUEST"},
		{"POST", "/sandboxes", `[` + long + `]`, 400, "INVALID_REQUEST"},
		{"PUT", "/sandboxes/" + id + "/files", `{"path":"/tmp/x","content":` + long + `}`, 400, "INVALID_REQUEST"},
		{"PATCH", "/sandboxes/" + id, strings.Repeat("1", api.MaxBodyBytes), 400, "INVALID_REQUEST"},
	} {
		r := c.Do(tc.method, tc.path, tokA, tc.body, nil)
		msg := apitest.ExpectErr(t, r, tc.status, tc.code)
		if len(msg) > 300 {
			t.Errorf("%s %s with a long number: message of %d bytes: %.100q…", tc.method, tc.path, len(msg), msg)
		}
		if !strings.Contains(msg, "characters") {
			t.Errorf("%s %s with a long number: message %q does not say how long a number may be", tc.method, tc.path, msg)
		}
	}
	// In strings, digits are text, whatever their number.
	if r := c.Do("PUT", "/sandboxes/"+id+"/files", tokA, map[string]any{"path": "/tmp/digits", "content": long + `\"` + long}, nil); r.Status != http.StatusOK {
		t.Fatalf("a file of digits: %v", r)
	}
	// MaxNumberLen characters are a number like any other (clamped).
	longest := strings.Repeat("9", api.MaxNumberLen)
	r := c.Do("PATCH", "/sandboxes/"+id, tokA, `{"timeoutMs":`+longest+`,"idleTimeoutMs":`+longest+`}`, nil)
	if got := apitest.DecodeData[apitest.Sandbox](t, r); got.TimeoutMs != 86400000 || got.IdleTimeoutMs != 86400000 {
		t.Fatalf("PATCH with %d-digit values: %+v", api.MaxNumberLen, got)
	}
	apitest.ExpectErr(t, c.Do("PATCH", "/sandboxes/"+id, tokA, `{"timeoutMs":-`+longest[1:]+`}`, nil), 422, "INVALID_TIMEOUT")
	if got := c.Get(tokA, id); got.TimeoutMs != 86400000 {
		t.Fatalf("refused PATCHes changed the sandbox: %+v", got)
	}
}

// TestLongNumberCostsNoMoreThanItsLength: answering a body that is one
// number of the body limit's length costs the handler no more CPU than
// a valid body of the same length (the same short object after that much
// white space) costs it, give or take noise: the number is not parsed.
// Both are measured as CPU time of the thread the handler runs on, so
// neither the machine's speed nor its other work moves the comparison.
func TestLongNumberCostsNoMoreThanItsLength(t *testing.T) {
	srv, _ := fuzzServer(t)
	hostile := hugeNumberBody("timeoutMs")
	valid := `{"timeoutMs":60000}`
	valid = strings.Repeat(" ", len(hostile)-len(valid)) + valid
	cost := func(body string) (time.Duration, *httptest.ResponseRecorder) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		best := time.Duration(1<<63 - 1)
		var rec *httptest.ResponseRecorder
		for range 3 {
			rec = httptest.NewRecorder()
			req := fuzzRequest("PATCH", "/v1/sandboxes/sbx-none", body)
			start := threadCPU(t)
			srv.ServeHTTP(rec, req)
			best = min(best, threadCPU(t)-start)
		}
		return best, rec
	}
	ref, refAns := cost(valid)
	got, ans := cost(hostile)
	t.Logf("CPU for %d bytes: one number %v, white space and a valid object %v", len(hostile), got, ref)
	if got > 3*ref+100*time.Millisecond {
		t.Errorf("a body that is one number of %d digits cost the handler %v of CPU, a valid body of the same length %v: the number is parsed", len(hostile), got, ref)
	}
	if refAns.Code != http.StatusNotFound || ans.Code != http.StatusUnprocessableEntity {
		t.Fatalf("answers: valid body %d %s, one number %d %s; want 404 and 422", refAns.Code, apitest.Truncate(refAns.Body.Bytes(), 200), ans.Code, apitest.Truncate(ans.Body.Bytes(), 200))
	}
}

// TestLongNumberIsNotBuffered: a body that is one number of the body
// limit's length is refused without being held in memory (the handler
// allocates a small part of its 8 MiB; io.ReadAll of it alone allocates
// more than the body), and the answer keeps the connection: the rest of
// the body is dropped, not left for a reset that would hide the 422 from
// a client still sending it. A valid body of the same length is read as
// before.
func TestLongNumberIsNotBuffered(t *testing.T) {
	srv, _ := fuzzServer(t)
	for _, tc := range []struct {
		name, body string
		status     int
		most       uint64 // bytes the handler may allocate
	}{
		{"one number", hugeNumberBody("timeoutMs"), http.StatusUnprocessableEntity, 1 << 20},
		{"one number after white space", strings.Repeat(" ", 1<<20) + `{"timeoutMs":` + strings.Repeat("7", 6<<20) + "}", http.StatusUnprocessableEntity, 4 << 20},
		{"valid", strings.Repeat(" ", 8<<20-19) + `{"timeoutMs":60000}`, http.StatusNotFound, 1 << 40},
	} {
		req := fuzzRequest("PATCH", "/v1/sandboxes/sbx-none", tc.body)
		rec := httptest.NewRecorder()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		srv.ServeHTTP(rec, req)
		runtime.ReadMemStats(&after)
		if rec.Code != tc.status {
			t.Fatalf("%s: answered %d %s, want %d", tc.name, rec.Code, apitest.Truncate(rec.Body.Bytes(), 200), tc.status)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > tc.most {
			t.Errorf("%s: the handler allocated %d bytes for a body of %d, at most %d allowed", tc.name, got, len(tc.body), tc.most)
		}
		if n, _ := req.Body.Read(make([]byte, 1)); n != 0 {
			t.Errorf("%s: the body was left unread", tc.name)
		}
		if rec.Header().Get("Connection") == "close" {
			t.Errorf("%s: the answer closes the connection", tc.name)
		}
	}
}

func threadCPU(t *testing.T) time.Duration {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// TestLongNumbersDoNotHoldUpOthers: while account a has eight bodies of
// the body limit's length in flight, each one number, account b's
// ordinary requests all succeed, and every one of a's is refused.
func TestLongNumbersDoNotHoldUpOthers(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	c.Continue = true
	body := hugeNumberBody("timeoutMs")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := "/sandboxes/sbx-none"
			method := "PATCH"
			if i%2 == 1 {
				method, path = "POST", "/sandboxes"
			}
			r := c.Do(method, path, tokA, body, nil)
			if r.Status != http.StatusUnprocessableEntity || r.ErrCode() != "INVALID_TIMEOUT" {
				t.Errorf("%s %s with a number of %d digits: %v", method, path, len(body), r)
			}
		}()
	}
	for range 10 {
		sb := c.Create(tokB, map[string]any{"timeoutMs": 60000})
		if r := c.Do("PATCH", "/sandboxes/"+sb.ID, tokB, map[string]any{"timeoutMs": 120000}, nil); r.Status != http.StatusOK {
			t.Errorf("account b's PATCH while a's long numbers are in flight: %v", r)
		}
		if r := c.Do("GET", "/sandboxes", tokB, nil, nil); r.Status != http.StatusOK {
			t.Errorf("account b's list while a's long numbers are in flight: %v", r)
		}
	}
	wg.Wait()
}

// TestLongNumbersDrainAtTheAccountsRate: what an account's refused bodies
// leave is dropped at api.DrainRate, shared by all of its requests: four
// 8 MiB numbers of one account sent at once are all answered only after
// their bytes' time at that rate (less its burst and what was read before
// the refusal), while another account's one, sent beside them, is
// answered before they can be: its drain has a rate of its own.
func TestLongNumbersDrainAtTheAccountsRate(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	c.Continue = true
	body := hugeNumberBody("timeoutMs")
	refused := func(tok string) {
		if r := c.Do("PATCH", "/sandboxes/sbx-none", tok, body, nil); r.Status != http.StatusUnprocessableEntity || r.ErrCode() != "INVALID_TIMEOUT" {
			t.Errorf("a number of %d digits: %v", len(body), r)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { refused(tokA) })
	}
	refused(tokB)
	other := time.Since(start)
	wg.Wait()
	all := time.Since(start)
	least := time.Duration(float64(4*len(body)-2<<20) / api.DrainRate * float64(time.Second))
	t.Logf("four of one account's 8 MiB numbers answered after %v (at least %v at the drain rate), another account's one after %v", all, least, other)
	if all < least {
		t.Errorf("four 8 MiB numbers of one account were all answered after %v, less than their bytes' time at the drain rate (%v): not drained at the account's rate", all, least)
	}
	if other >= least {
		t.Errorf("another account's 8 MiB number was answered after %v, not before the first account's four could be (%v): its drain shared their rate", other, least)
	}
}
