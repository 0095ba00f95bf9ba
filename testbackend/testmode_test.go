package testbackend

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

func startTestMode(t *testing.T, dir string) *Backend {
	t.Helper()
	b, err := New(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: dir, Mode: sandbox.ModeTest, Tokens: []Token{{Token: "t", Account: "acct", Scopes: []string{api.ScopeRead, api.ScopeWrite}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTestModeRestartKeepsSandboxesAndFiles: in test mode a sandbox and
// the files written to it outlive a restart of the backend, and so do
// those of a record written before the test mode had a runtime (its files
// in the record itself); reconciliation ends none of them.
func TestTestModeRestartKeepsSandboxesAndFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b := startTestMode(t, dir)
	res, err := b.Manager().Create(ctx, "acct", "", sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	if res.Sandbox.Status != sandbox.StatusRunning {
		t.Fatalf("create answered %s", res.Sandbox.Status)
	}
	if err := b.Manager().WriteFile(ctx, "acct", id, "/home/user/a.txt", "kept"); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// A record as test mode wrote them before its runtime: no container,
	// the files in the record.
	st, err := store.Open(filepath.Join(dir, "records"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	legacy := &store.Sandbox{ID: "sbx-legacy", Account: "acct", Status: sandbox.StatusRunning, Template: "base", Image: "rarecloud/base:1", CreatedAt: now, TimeoutMs: 3600000, ExpiresAt: now.Add(time.Hour), Files: map[string]string{"/tmp/old": "still here"}}
	if err := st.PutSandbox(legacy); err != nil {
		t.Fatal(err)
	}

	b = startTestMode(t, dir)
	defer b.Close()
	m := b.Manager()
	for _, f := range []struct{ id, path, want string }{{id, "/home/user/a.txt", "kept"}, {"sbx-legacy", "/tmp/old", "still here"}} {
		got, err := m.ReadFile(ctx, "acct", f.id, f.path) // after the restart's reconciliation
		if err != nil || got != f.want {
			t.Fatalf("%s %s after a restart: %q %v, want %q", f.id, f.path, got, err, f.want)
		}
		if v, err := m.Get("acct", f.id); err != nil || v.Status != sandbox.StatusRunning {
			t.Fatalf("%s after a restart: %+v %v", f.id, v, err)
		}
	}
	recs, err := st.Sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Files != nil {
			t.Errorf("record %s still carries its files after the runtime took them", r.ID)
		}
	}
}
