package api_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// TestVCPULimit: account A at its vCPU limit cannot create (409
// VCPU_LIMIT_EXCEEDED naming the limit and the use), account B still can,
// and A can again the moment a sandbox of its own is deleted or has ended.
// Limits come from the tokens file ("accounts") over the backend default.
func TestVCPULimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.json")
	err := os.WriteFile(tokens, []byte(`{"tokens": [
		{"token": "`+tokA+`", "account": "acct-a", "scopes": ["services:read", "services:write"]},
		{"token": "`+tokB+`", "account": "acct-b", "scopes": ["services:read", "services:write"]}],
	  "accounts": [{"account": "acct-a", "vcpuLimit": 3}]}`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// The default (2 vCPUs) applies to acct-b, the file's 3 to acct-a.
	b, err := startBackend(filepath.Join(dir, "data"), testbackend.Config{Mode: "test", TokensFile: tokens, Tokens: []testbackend.Token{}, VCPULimit: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := newClient(t, b.URL())

	py := c.Create(tokA, map[string]any{"template": "python"}) // 2 vCPUs
	base := c.Create(tokA, map[string]any{"template": "base"}) // 1 vCPU: at the limit
	if used, limit := b.Manager().VCPUUsage("acct-a"); used != 3 || limit != 3 {
		t.Fatalf("acct-a uses %v of %v vCPUs, want 3 of 3", used, limit)
	}
	msg := apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "base"}, nil), http.StatusConflict, sandbox.CodeVCPULimitExceeded)
	for _, want := range []string{"acct-a", "3 of 3 vCPUs", "needs 1 more", "delete"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("message %q does not say %q", msg, want)
		}
	}
	// Another account is not affected; its own limit holds for it.
	c.Create(tokB, map[string]any{"template": "python"})
	msg = apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokB, map[string]any{"template": "base"}, nil), http.StatusConflict, sandbox.CodeVCPULimitExceeded)
	if !strings.Contains(msg, "2 of 2 vCPUs") {
		t.Fatalf("acct-b's message %q does not name its default limit", msg)
	}

	// A refused create spends no Idempotency-Key: after a delete the same
	// key and body succeed.
	key := map[string]string{"Idempotency-Key": "cap-" + t.Name()}
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "base"}, key), http.StatusConflict, sandbox.CodeVCPULimitExceeded)
	if r := c.Do("DELETE", "/sandboxes/"+base.ID, tokA, nil, nil); r.Status != http.StatusNoContent && r.Status != http.StatusOK {
		t.Fatalf("delete: %v", r)
	}
	r := c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "base"}, key)
	if r.Status != http.StatusCreated {
		t.Fatalf("after a delete, create: want 201, got %v", r)
	}
	again := apitest.DecodeData[apitest.Sandbox](t, r)
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "base"}, nil), http.StatusConflict, sandbox.CodeVCPULimitExceeded)

	// Ended sandboxes hold nothing: a run-mode one (which ends at once in
	// test mode) leaves the capacity as it was.
	c.Do("DELETE", "/sandboxes/"+again.ID, tokA, nil, nil)
	job := c.Create(tokA, map[string]any{"template": "base", "run": true})
	if got := c.Get(tokA, job.ID); got.Status != "exited" {
		t.Fatalf("run-mode sandbox in test mode: %s", got.Status)
	}
	c.Create(tokA, map[string]any{"template": "base"})
	if used, _ := b.Manager().VCPUUsage("acct-a"); used != 3 {
		t.Fatalf("acct-a uses %v vCPUs, want 3 (python and base; the exited job holds none)", used)
	}
	_ = py
}

// TestVCPULimitWarmPool: warm-pool containers count for nobody: with a
// full pool an account whose limit fits one base sandbox still creates
// one (from the pool), then no more, while another account can.
func TestVCPULimitWarmPool(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{PoolSize: 1, VCPULimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { apitest.DeleteAll(b.URL(), time.Minute, tokA, tokB); b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.Manager().WaitPoolFull(ctx); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, b.URL())
	if used, _ := b.Manager().VCPUUsage("acct-a"); used != 0 {
		t.Fatalf("with only warm containers acct-a uses %v vCPUs", used)
	}
	if sb := c.Create(tokA, map[string]any{"template": "base"}); sb.Status != "running" {
		t.Fatalf("the first base sandbox did not come from the pool: %s", sb.Status)
	}
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "base"}, nil), http.StatusConflict, sandbox.CodeVCPULimitExceeded)
	c.Create(tokB, map[string]any{"template": "base"})
}

// TestVCPULimitSettings: bad per-account limits stop the backend at start.
func TestVCPULimitSettings(t *testing.T) {
	t.Parallel()
	for _, accounts := range []string{
		`[{"account": "acct-a", "vcpuLimit": 0}]`,
		`[{"account": "acct-a", "vcpuLimit": -1}]`,
		`[{"vcpuLimit": 4}]`,
		`[{"account": "acct-a", "vcpuLimit": "4"}]`,
		`[{"account": "acct-a", "cpus": 4}]`,
	} {
		dir := t.TempDir()
		tokens := filepath.Join(dir, "tokens.json")
		body := `{"tokens": [{"token": "t", "account": "acct-a", "scopes": ["services:read"]}], "accounts": ` + accounts + `}`
		if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := startBackend(filepath.Join(dir, "data"), testbackend.Config{Mode: "test", TokensFile: tokens, Tokens: []testbackend.Token{}})
		if err == nil {
			b.Close()
			t.Fatalf("accounts %s: the backend started", accounts)
		}
		t.Logf("accounts %s: %v", accounts, err)
	}
}

// TestVCPULimitConcurrent: creates racing for the last vCPUs never take an
// account past its limit: of 12 at once with room for 3, exactly 3 succeed
// and the rest answer VCPU_LIMIT_EXCEEDED.
func TestVCPULimitConcurrent(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{Mode: "test", VCPULimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := newClient(t, b.URL())
	c.Continue = true
	codes := make(chan string, 12)
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "base"}, nil)
			if r.Status == http.StatusCreated {
				codes <- "created"
				return
			}
			codes <- r.ErrCode()
		}()
	}
	wg.Wait()
	close(codes)
	count := map[string]int{}
	for code := range codes {
		count[code]++
	}
	if count["created"] != 3 || count[sandbox.CodeVCPULimitExceeded] != 9 {
		t.Fatalf("12 creates racing for 3 vCPUs: %v", count)
	}
	if used, _ := b.Manager().VCPUUsage("acct-a"); used != 3 {
		t.Fatalf("acct-a uses %v vCPUs", used)
	}
}

// TestHostCapacityIsShared: on a host with room for seven base sandboxes
// (8 GiB at overcommit 1, each counted at 1 GiB and gVisor's 64 MiB), an
// account with vCPUs to spare asks for twelve at once: the eight past its
// share (60% of the host: four) are refused at once with 409
// HOST_SHARE_EXCEEDED naming the share, and another account's create
// made during the burst is accepted and runs. That account may fill the
// rest of the host, and the create past it answers 503
// HOST_CAPACITY_EXHAUSTED with a Retry-After: the sandboxes' memory never
// exceeds the host's.
func TestHostCapacityIsShared(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{
		PoolSize: 0, HostMemoryBytes: 10 << 30, HostMemoryReserve: 2 << 30, MemoryOvercommit: 1, HostShare: 0.6,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := newClient(t, b.URL())
	c.Continue = true
	type answer struct {
		status int
		code   string
		msg    string
		id     string
	}
	answers := make(chan answer, 12)
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "base"}, nil)
			a := answer{status: r.Status, code: r.ErrCode()}
			if r.Env.Error != nil {
				a.msg = r.Env.Error.Message
			}
			if r.Status == http.StatusCreated {
				a.id = apitest.DecodeData[apitest.Sandbox](t, r).ID
			}
			answers <- a
		}()
	}
	// The other account, during the burst.
	others := []string{c.Running(tokB, map[string]any{"template": "base"}).ID}
	wg.Wait()
	close(answers)
	var created []string
	refused := 0
	for a := range answers {
		switch {
		case a.status == http.StatusCreated:
			created = append(created, a.id)
		case a.status == http.StatusConflict && a.code == sandbox.CodeHostShareExceeded &&
			strings.Contains(a.msg, "acct-a") && strings.Contains(a.msg, "share"):
			refused++
		default:
			t.Errorf("a create of the burst answered %d %s %q", a.status, a.code, a.msg)
		}
	}
	// 4 x 1.0625 GiB fit in acct-a's 4.8 GiB share, a fifth does not.
	if len(created) != 4 || refused != 8 {
		t.Fatalf("12 creates for a share of 4: %d created, %d refused", len(created), refused)
	}
	t.Cleanup(func() {
		for _, id := range created {
			c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil)
		}
		for _, id := range others {
			c.Do("DELETE", "/sandboxes/"+id, tokB, nil, nil)
		}
	})
	// The other account fills the host: 4 + 3 sandboxes fit in 8 GiB, an
	// eighth does not, whatever share is left.
	for range 2 {
		others = append(others, c.Create(tokB, map[string]any{"template": "base"}).ID)
	}
	r := c.Do("POST", "/sandboxes", tokB, map[string]any{"template": "base"}, nil)
	if r.Status != http.StatusServiceUnavailable || r.ErrCode() != sandbox.CodeHostCapacityExhausted || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a create past the host's memory: %v (Retry-After %q)", r, r.Header.Get("Retry-After"))
	}
	for _, id := range created {
		c.WaitStatus(tokA, id, apitest.WaitTimeout, "running")
	}
	if got := c.Get(tokB, others[0]); got.Status != "running" {
		t.Fatalf("the other account's sandbox: %+v", got)
	}
}

// TestCreateRefusedBelowTheDiskReserve: a backend whose data directory's
// file system has less free space than --disk-reserve answers a create 503
// HOST_CAPACITY_EXHAUSTED naming the disk, with Retry-After, as
// openapi.yaml documents; without the reserve the same create succeeds.
func TestCreateRefusedBelowTheDiskReserve(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{Mode: "test", DiskReserve: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := newClient(t, b.URL())
	c.Continue = true
	r := c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "base"}, nil)
	if r.Status != http.StatusServiceUnavailable || r.ErrCode() != sandbox.CodeHostCapacityExhausted ||
		r.Header.Get("Retry-After") == "" || !strings.Contains(r.Env.Error.Message, "disk") {
		t.Fatalf("a create below the disk reserve: %v (Retry-After %q)", r, r.Header.Get("Retry-After"))
	}

	b2, err := startBackend(t.TempDir(), testbackend.Config{Mode: "test", DiskReserve: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Close() })
	newClient(t, b2.URL()).Create(tokA, map[string]any{"template": "base"})
}
