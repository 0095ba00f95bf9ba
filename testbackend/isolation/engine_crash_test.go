package isolation

import (
	"net/http"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// TestEngineCrashDuringCommand: a command in flight when the engine
// crashes answers 503 SERVICE_UNAVAILABLE, like every other request while
// the engine is away, not an internal error about the broken agent session.
func TestEngineCrashDuringCommand(t *testing.T) {
	t.Parallel()
	requireEngine(t)
	e := newPrivateEngine(t)
	e.loadImage(t, sandbox.ImageBase)
	b, err := startBackend(t.TempDir(), testbackend.Config{DockerHost: e.host, Network: "none"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := newClient(t, b.URL())
	sb := c.Running(tokA, map[string]any{"template": "base"})
	inflight := make(chan apitest.Response, 1)
	go func() {
		inflight <- c.Do("POST", "/sandboxes/"+sb.ID+"/commands", tokA, map[string]any{"cmd": "sleep 60", "timeoutMs": 90000}, nil)
	}()
	time.Sleep(500 * time.Millisecond)
	e.crash(t)
	select {
	case r := <-inflight:
		if r.Status != http.StatusServiceUnavailable || r.ErrCode() != "SERVICE_UNAVAILABLE" {
			t.Fatalf("command in flight during the crash: %v, want 503 SERVICE_UNAVAILABLE", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer within 30 s of the crash")
	}
}
