package api_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// TestIdempotentCommand: over HTTP, on the real engine, a command sent
// again with its Idempotency-Key answers the first run's result (same
// status and body, Idempotent-Replayed) and runs once: the line it appends
// is in the file once, also when the two requests come at the same time.
// The same key with another body is IDEMPOTENCY_KEY_REUSED, a bad key is
// INVALID_IDEMPOTENCY_KEY, and every answer names the extension.
func TestIdempotentCommand(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	sb := c.Running(tokA, map[string]any{"template": "base"})
	t.Cleanup(func() { c.Raw("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil) })
	path := "/sandboxes/" + sb.ID + "/commands"
	key := fmt.Sprintf("cmd-%d", time.Now().UnixNano())
	body := map[string]any{"cmd": "echo ran >> /home/user/count; wc -l < /home/user/count"}

	first := c.Do("POST", path, tokA, body, map[string]string{"Idempotency-Key": key})
	if first.Status != 200 || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %v replayed=%q", first, first.Header.Get("Idempotent-Replayed"))
	}
	if got := first.Header.Get(api.ExtensionsHeader); got != "exec-idempotency" {
		t.Errorf("%s = %q, want exec-idempotency", api.ExtensionsHeader, got)
	}
	again := c.Do("POST", path, tokA, body, map[string]string{"Idempotency-Key": key})
	if again.Status != 200 || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Env.Data) != string(first.Env.Data) {
		t.Fatalf("retry: %v replayed=%q %s, want the first answer %s replayed", again, again.Header.Get("Idempotent-Replayed"), again.Env.Data, first.Env.Data)
	}
	if out := c.command(sb.ID, "wc -l < /home/user/count").Stdout; strings.TrimSpace(out) != "1" {
		t.Fatalf("the file has %q lines after a command and its retry, want 1", out)
	}

	apitest.ExpectErr(t, c.Do("POST", path, tokA, map[string]any{"cmd": "echo other"}, map[string]string{"Idempotency-Key": key}), 422, "IDEMPOTENCY_KEY_REUSED")
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes/"+sb.ID+"/run_code", tokA, map[string]any{"language": "python", "code": "1"}, map[string]string{"Idempotency-Key": key}), 422, "IDEMPOTENCY_KEY_REUSED")
	apitest.ExpectErr(t, c.Do("POST", path, tokA, body, map[string]string{"Idempotency-Key": "bad\tkey"}), 400, "INVALID_IDEMPOTENCY_KEY")
	apitest.ExpectErr(t, c.Do("POST", path, tokA, body, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}), 400, "INVALID_IDEMPOTENCY_KEY")
	apitest.ExpectErr(t, c.Do("POST", path, tokB, body, map[string]string{"Idempotency-Key": key}), 404, "NOT_FOUND")

	// Two at once: one runs, the other waits for it or replays it.
	c2 := newClient(t, shared.URL())
	c2.Continue = true
	slow := map[string]any{"cmd": "sleep 1; echo ran >> /home/user/race; wc -l < /home/user/race"}
	answers := make([]apitest.Response, 2)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = c2.Do("POST", path, tokA, slow, map[string]string{"Idempotency-Key": key + "-race"})
		}()
	}
	wg.Wait()
	replays := 0
	for _, r := range answers {
		if r.Status != 200 || string(r.Env.Data) != string(answers[0].Env.Data) {
			t.Fatalf("concurrent answers differ: %v %s / %v %s", answers[0], answers[0].Env.Data, r, r.Env.Data)
		}
		if r.Header.Get("Idempotent-Replayed") == "true" {
			replays++
		}
	}
	if replays != 1 {
		t.Errorf("%d of 2 concurrent answers replayed, want 1", replays)
	}
	if out := c.command(sb.ID, "wc -l < /home/user/race").Stdout; strings.TrimSpace(out) != "1" {
		t.Fatalf("the file has %q lines after two concurrent requests with one key, want 1", out)
	}
}

// TestIdempotentCommandTestMode: the test mode (no engine) honours the key
// too: a retry is replayed, another body with the key is refused.
func TestIdempotentCommandTestMode(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{Mode: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := newClient(t, b.URL())
	sb := c.Running(tokA, map[string]any{"template": "node"})
	path := "/sandboxes/" + sb.ID + "/run_code"
	body := map[string]any{"language": "node", "code": "console.log(1)"}
	r := c.Do("POST", path, tokA, body, map[string]string{"Idempotency-Key": "k1"})
	if r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "" || r.Header.Get(api.ExtensionsHeader) != "exec-idempotency" {
		t.Fatalf("first: %v %v", r, r.Header)
	}
	if r := c.Do("POST", path, tokA, body, map[string]string{"Idempotency-Key": "k1"}); r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %v replayed=%q", r, r.Header.Get("Idempotent-Replayed"))
	}
	apitest.ExpectErr(t, c.Do("POST", path, tokA, map[string]any{"language": "node", "code": "2"}, map[string]string{"Idempotency-Key": "k1"}), 422, "IDEMPOTENCY_KEY_REUSED")
}
