package api_test

import (
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestFileWriteThatEndsTheSandbox: a run-mode program waits for a file
// and exits as soon as it appears, so the write's own process is cut off
// by the sandbox's end right after its last step. The write still answers
// at once and 200: it reached its last step (the file's rename) before
// the sandbox stopped. Before, the engine lost the process's exit with the
// sandbox, and the write answered 500 "timed out".
func TestFileWriteThatEndsTheSandbox(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	c.HTTP = &http.Client{Timeout: notRegularWait}
	const n = 6
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := c.Running(tokA, map[string]any{"cmd": []string{"sh", "-c", "while [ ! -f /tmp/stop ]; do sleep 0.01; done; echo stopped"}}).ID
			start := time.Now()
			r := c.Do("PUT", "/sandboxes/"+id+"/files", tokA, map[string]any{"path": "/tmp/stop", "content": "stop"}, nil)
			if r.Status != http.StatusOK {
				t.Errorf("the write that ends sandbox %s: %v after %s", id, r, time.Since(start))
			}
			c.WaitStatus(tokA, id, notRegularWait, "exited")
		}()
	}
	wg.Wait()
}
