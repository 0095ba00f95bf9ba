package api_test

import (
	"testing"
	"time"
)

// eventually retries check, with backoff, until it returns nil or timeout
// has passed, then fails the test with its last error. For what the
// backend finishes in the background, such as removing the container of a
// deleted sandbox.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	wait := 10 * time.Millisecond
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(wait)
		wait = min(wait*2, 500*time.Millisecond)
	}
}
