package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// wideBody is a body of about api.MaxBodyBytes whose field holds as many
// members of the given shape as fit: {"field":{"a0":"","a1":"",…}}.
func wideBody(field string, object bool) string {
	var b strings.Builder
	open, end := "[", "]"
	if object {
		open, end = "{", "}"
	}
	b.WriteString(`{"` + field + `":` + open)
	for i := 0; b.Len() < api.MaxBodyBytes-64; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		if object {
			fmt.Fprintf(&b, `"a%d":""`, i)
		} else {
			b.WriteString(`""`)
		}
	}
	b.WriteString(end + "}")
	return b.String()
}

// TestWideListsAreRefusedUnread: an object or array of more than
// api.MaxMembers members, or nesting deeper than api.MaxNesting, is
// refused (400 INVALID_REQUEST) as its bytes arrive, before the decoder
// builds it: a body of the body limit's length made of a million labels
// or arguments costs the handler a small part of its length, not the
// hundred megabytes the decoded map or slice held. Lists within the
// guard still reach their field's own limit.
func TestWideListsAreRefusedUnread(t *testing.T) {
	srv, _ := fuzzServer(t)
	deep := strings.Repeat("[", api.MaxNesting+1) + strings.Repeat("]", api.MaxNesting+1)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code, says               string
	}{
		{"a million labels", "POST", "/v1/sandboxes", wideBody("labels", true), 400, "INVALID_REQUEST", "members"},
		{"a million environment variables", "POST", "/v1/sandboxes", wideBody("env", true), 400, "INVALID_REQUEST", "members"},
		{"a million arguments", "POST", "/v1/sandboxes", wideBody("cmd", false), 400, "INVALID_REQUEST", "members"},
		{"a million allowed names", "POST", "/v1/sandboxes", wideBody("egressAllowlist", false), 400, "INVALID_REQUEST", "members"},
		{"a wide timeout", "PATCH", "/v1/sandboxes/sbx-none", wideBody("timeoutMs", false), 400, "INVALID_REQUEST", "members"},
		{"nested too deep", "POST", "/v1/sandboxes", `{"timeoutMs":` + deep + `}`, 400, "INVALID_REQUEST", "nested"},
		// Within the guard, each field's own limit answers.
		{"1,023 labels", "POST", "/v1/sandboxes", wideLabels(api.MaxMembers - 1), 400, "INVALID_LABELS", "at most"},
	} {
		req := fuzzRequest(tc.method, tc.path, tc.body)
		rec := httptest.NewRecorder()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		srv.ServeHTTP(rec, req)
		runtime.ReadMemStats(&after)
		var env apitest.Envelope
		if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil {
			t.Fatalf("%s: answered %d %s: %v", tc.name, rec.Code, apitest.Truncate(rec.Body.Bytes(), 200), err)
		}
		msg := apitest.ExpectErr(t, apitest.Response{Status: rec.Code, Header: rec.Header(), Env: env}, tc.status, tc.code)
		if !strings.Contains(msg, tc.says) {
			t.Errorf("%s: message %q does not say %q", tc.name, msg, tc.says)
		}
		if len(msg) > 300 {
			t.Errorf("%s: message of %d bytes: %.100q…", tc.name, len(msg), msg)
		}
		// The refused ones: a small part of the body, where decoding
		// it whole took some 100 MB.
		if tc.code == "INVALID_REQUEST" {
			if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
				t.Errorf("%s: the handler allocated %d bytes for a body of %d, at most %d allowed", tc.name, got, len(tc.body), 4<<20)
			}
		}
	}
}

// wideLabels is a create body with n labels.
func wideLabels(n int) string {
	var b strings.Builder
	b.WriteString(`{"labels":{`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":"v"`, i)
	}
	b.WriteString("}}")
	return b.String()
}

// TestWideListsLeaveOthersServed: one account's wide bodies, eight at a
// time, are all refused, and another account's creates and lists go on.
func TestWideListsLeaveOthersServed(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	c.Continue = true
	body := wideBody("labels", true)
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			r := c.Do("POST", "/sandboxes", tokA, body, nil)
			if r.Status != http.StatusBadRequest || r.ErrCode() != "INVALID_REQUEST" {
				t.Errorf("a create of %d labels: %v", strings.Count(body, ","), r)
			}
		}()
	}
	for range 10 {
		c.Create(tokB, map[string]any{"timeoutMs": 60000})
		if r := c.Do("GET", "/sandboxes", tokB, nil, nil); r.Status != http.StatusOK {
			t.Errorf("account b's list beside a's wide bodies: %v", r)
		}
	}
	for range 8 {
		<-done
	}
}
