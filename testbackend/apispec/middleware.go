package apispec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
)

// Validating checks every answer of h against openapi.yaml before it goes
// out (the backend's Config.ValidateResponses, for test runs). An answer that does not
// match is replaced by a 500 INTERNAL naming the mismatch, so that the
// request's caller, a test, fails where it happened.
func Validating(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		body := rec.body.Bytes()
		if err := Validate(r, rec.status, rec.header, body); err != nil {
			log.Error("answer does not match openapi.yaml", "method", r.Method, "path", r.URL.Path, "status", rec.status, "err", err)
			msg, _, _ := strings.Cut(err.Error(), "\n") // the first line; the log has the rest
			out, _ := json.Marshal(map[string]any{"ok": false, "error": map[string]string{
				"code":    "INTERNAL",
				"message": fmt.Sprintf("test backend: the answer to %s %s (%d) does not match openapi.yaml: %s", r.Method, r.URL.Path, rec.status, msg),
			}})
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write(out)
			return
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(body)
	})
}

// recorder keeps an answer until it has been checked.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.wrote = true
	return r.body.Write(p)
}
