package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A command that runs longer than the HTTP client's per-attempt timeout
// fails with the client as configured and succeeds through ForExec.
func TestForExecOutlastsTheHTTPTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(600 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true,"data":{"stdout":"done\n","stderr":"","exitCode":0,"timedOut":false,"stdoutTruncated":false,"stderrTruncated":false,"durationMs":600}}`)
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL, Token: "rc_pat_x", HTTPClient: &http.Client{Timeout: 200 * time.Millisecond}, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.RunCommand(ctx, "sbx-a", CommandRequest{Cmd: "sleep 1", TimeoutMs: 1000}); err == nil {
		t.Fatal("the call outlived the HTTP client's timeout: the test cannot show anything")
	}
	res, err := c.ForExec(1000).RunCommand(ctx, "sbx-a", CommandRequest{Cmd: "sleep 1", TimeoutMs: 1000})
	if err != nil || res.Stdout != "done\n" {
		t.Fatalf("through ForExec: %+v, %v", res, err)
	}
	if c.ForExec(1000) == c {
		t.Error("ForExec returned the same client although its timeout is too short")
	}
	long := &Client{http: &http.Client{Timeout: time.Hour}}
	if long.ForExec(1000) != long {
		t.Error("ForExec copied a client whose timeout was long enough")
	}
}
