package takeover

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/testmode"
)

// TestRecordsAdoptsRunningSandboxes: a running record without a container
// gets one, with the files it kept, which leave the record; a record that
// is not running gets none; a second take-over changes nothing.
func TestRecordsAdoptsRunningSandboxes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "records"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, sb := range []*store.Sandbox{
		{ID: "sbx-legacy", Account: "acct", Status: sandbox.StatusRunning, Template: "base", Image: "rarecloud/base:1", CreatedAt: now, TimeoutMs: 3600000, ExpiresAt: now.Add(time.Hour), Files: map[string]string{"/tmp/old": "still here"}},
		{ID: "sbx-ended", Account: "acct", Status: sandbox.StatusExited, Template: "base", Image: "rarecloud/base:1", CreatedAt: now, TimeoutMs: 3600000, ExpiresAt: now.Add(time.Hour)},
	} {
		if err := st.PutSandbox(sb); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := testmode.Open(filepath.Join(dir, "testmode"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Records(rt, st); err != nil {
			t.Fatal(err)
		}
	}
	list, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Labels[container.LabelSandboxID] != "sbx-legacy" || list[0].Name != sandbox.ContainerName("sbx-legacy") {
		t.Fatalf("containers after the take-over: %+v, want one for sbx-legacy", list)
	}
	got, err := rt.ReadFile(ctx, list[0].ID, "/tmp/old", 1<<20, nil)
	if err != nil || string(got) != "still here" {
		t.Fatalf("the adopted file: %q %v", got, err)
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
