package isolation

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// TestEngineCrashDuringCommand: a command in flight when the engine
// crashes answers 502 COMMAND_OUTCOME_UNKNOWN, saying that it may have
// run: not the 503 SERVICE_UNAVAILABLE of the requests refused while the
// engine is away (a client may send those again; this one it must not),
// and not an internal error about the broken agent session.
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
		inflight <- c.Do("POST", "/sandboxes/"+sb.ID+"/commands", tokA, map[string]any{"cmd": "touch /home/user/started; sleep 60", "timeoutMs": 90000}, nil)
	}()
	// The crash must come while the command runs, however long it takes
	// to start: before, the answer is rightly 503 (not started).
	for {
		if st, _ := c.Raw("GET", "/sandboxes/"+sb.ID+"/files?path=/home/user/started", tokA, nil, nil); st == http.StatusOK {
			break
		}
		select {
		case r := <-inflight:
			t.Fatalf("the command answered before the crash: %v", r)
		case <-time.After(50 * time.Millisecond):
		}
	}
	e.crash(t)
	select {
	case r := <-inflight:
		if r.Status != http.StatusBadGateway || r.ErrCode() != "COMMAND_OUTCOME_UNKNOWN" || !strings.Contains(r.Env.Error.Message, "may have run") {
			t.Fatalf("command in flight during the crash: %v, want 502 COMMAND_OUTCOME_UNKNOWN saying it may have run", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer within 30 s of the crash")
	}
}
