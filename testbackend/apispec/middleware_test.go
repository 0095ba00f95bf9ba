package apispec

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An answer openapi.yaml allows goes out unchanged; one it does not allow
// (here a sandbox without its required fields, and an error without the
// envelope) becomes a 500 naming the mismatch.
func TestValidatingHandler(t *testing.T) {
	cases := []struct {
		name, path, body string
		status           int
		pass             bool
	}{
		{"documented error", "/v1/sandboxes/sbx-x", `{"ok":false,"error":{"code":"NOT_FOUND","message":"no sandbox sbx-x"}}`, 404, true},
		{"sandbox missing its fields", "/v1/sandboxes/sbx-x", `{"ok":true,"mocked":false,"data":{"id":"sbx-x"},"error":null}`, 200, false},
		{"error without the envelope", "/v1/sandboxes/sbx-x", `{"message":"nope"}`, 404, false},
		{"not JSON on an unknown route", "/v2/nothing", `nope`, 404, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := Validating(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}), slog.New(slog.DiscardHandler))
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			req.Header.Set("Authorization", "Bearer x")
			h.ServeHTTP(rec, req)
			switch {
			case tc.pass && (rec.Code != tc.status || rec.Body.String() != tc.body):
				t.Fatalf("a documented answer was changed: %d %s", rec.Code, rec.Body)
			case !tc.pass && (rec.Code != 500 || !strings.Contains(rec.Body.String(), "does not match openapi.yaml")):
				t.Fatalf("an undocumented answer went out: %d %s", rec.Code, rec.Body)
			case !tc.pass:
				// The replacement is itself a documented answer.
				if err := Validate(req, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
					t.Fatalf("the 500 for a mismatch is undocumented itself: %v", err)
				}
			}
		})
	}
}
