package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// TestWarmPool: a create from a template claims a warm container and
// answers running at once; the pool refills; claimed containers are never
// handed out again and outlive a restart, while idle warm containers go at
// shutdown and the next start fills the pool anew. A create with env never
// claims one: its container starts with the values, so that the record
// need not keep them (see TestEnvValuesLeaveTheRecord).
func TestWarmPool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := startBackend(dir, testbackend.Config{PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := b.Manager().WaitPoolFull(ctx); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, b.URL())
	// Pool members are not sandboxes: nobody lists them.
	if list := apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes", tokA, nil, nil)); len(list) != 0 {
		t.Fatalf("warm containers listed: %+v", list)
	}
	withEnv := c.Create(tokA, map[string]any{"template": "python", "env": map[string]string{"SECRET_HASH": "abc"}})
	if withEnv.Status != "pending" {
		t.Fatalf("a sandbox with env came from the pool: %+v", withEnv)
	}
	first := c.Create(tokA, map[string]any{"template": "python"})
	if first.Status != "running" {
		t.Fatalf("claimed sandbox is %s, want running at once", first.Status)
	}
	out := c.command(first.ID, `echo "[$SECRET_HASH]"; id -u`)
	if out.Stdout != "[]\n10001\n" {
		t.Fatalf("claimed sandbox: %+v", out)
	}
	c.WaitStatus(tokA, withEnv.ID, apitest.WaitTimeout, "running")
	r := c.Do("POST", "/sandboxes/"+withEnv.ID+"/run_code", tokA, map[string]any{"language": "python", "code": "import os; print(os.environ['SECRET_HASH'])"}, nil)
	if res := apitest.DecodeData[apitest.ExecResult](t, r); res.Stdout != "abc\n" {
		t.Fatalf("env in run_code: %+v", res)
	}
	if err := b.Manager().WaitPoolFull(ctx); err != nil {
		t.Fatal(err)
	}
	second := c.Create(tokA, map[string]any{"template": "python"})
	if second.Status != "running" {
		t.Fatalf("second claim: %s", second.Status)
	}
	// A fresh container, not the first one again.
	c.command(first.ID, "echo mine > /home/user/owner")
	if out := c.command(second.ID, "cat /home/user/owner 2>&1; echo \"[$SECRET_HASH]\""); out.Stdout != "cat: /home/user/owner: No such file or directory\n[]\n" {
		t.Fatalf("second sandbox sees the first one's state: %q", out.Stdout)
	}
	// Run mode and custom images never come from the pool.
	job := c.Create(tokA, map[string]any{"template": "python", "cmd": []string{"true"}})
	if job.Status != "pending" {
		t.Fatalf("run-mode sandbox from the pool: %+v", job)
	}
	if err := b.Manager().WaitPoolFull(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// Shutdown removed the idle warm containers; the claimed ones stay.
	before := poolContainers(ctx, t, dir)
	if len(before) != 2 {
		t.Fatalf("%d warm-pool containers after shutdown, want the 2 claimed", len(before))
	}
	b2, err := startBackend(dir, testbackend.Config{PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := b2.Manager().WaitPoolFull(ctx); err != nil {
		t.Fatal(err)
	}
	c = newClient(t, b2.URL())
	if out := c.command(first.ID, "cat /home/user/owner"); out.Stdout != "mine\n" {
		t.Fatalf("claimed sandbox after restart: %+v", out)
	}
	after := poolContainers(ctx, t, dir)
	kept := 0
	for id := range before {
		if after[id] {
			kept++
		}
	}
	if kept != 2 || len(after) != 5 {
		t.Errorf("after restart: %d of the old pool containers kept (want the 2 claimed), %d in all (want 5)", kept, len(after))
	}
	for _, id := range []string{first.ID, second.ID, job.ID, withEnv.ID} {
		c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil)
	}
	// Deletes answer before their containers are removed.
	if err := b2.Manager().AwaitRemovals(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(poolContainers(ctx, t, dir)); n != 3 {
		t.Errorf("%d warm-pool containers after deleting the claimed sandboxes, want the 3 idle ones", n)
	}
}

// poolContainers lists the containers of a data directory's instance that
// were started for the warm pool, claimed or not.
func poolContainers(ctx context.Context, t *testing.T, dir string) map[string]bool {
	t.Helper()
	rt, err := docker.New(docker.Options{Instance: instance.ID(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	list, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, c := range list {
		if c.Labels[container.LabelPool] != "" {
			out[c.ID] = true
		}
	}
	return out
}
