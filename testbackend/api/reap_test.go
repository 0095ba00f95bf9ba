package api_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/egress"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
	sbxpkg "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// instanceContainers counts the containers of the backend on data.
func instanceContainers(t *testing.T, data string) int {
	t.Helper()
	return len(listInstance(t, data))
}

// writeTokens writes the tokens file a backend process reads.
func writeTokens(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(path, []byte(`{"tokens":[{"token":"`+tokA+`","account":"acct-a","scopes":["services:read","services:write"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDeadBackendIsReaped: a backend killed with SIGKILL whose data
// directory is then deleted leaves nothing behind once another backend
// starts. Controls, on the same engine at the same time: a killed backend
// whose data directory is still there keeps its containers (it may start
// again on its records), and a live backend keeps its containers even
// with its data directory gone (its lease is held).
//
// An ephemeral backend (a test run's shared one) is reaped once it is gone
// even with its data directory left behind.
func TestDeadBackendIsReaped(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tokens := writeTokens(t, root)
	withSandbox := func(name string) (*process, string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, name), 0o700); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(root, name, "data")
		p := startProcess(t, data, tokens, "")
		c := newClient(t, "http://"+p.addr+"/v1")
		c.Running(tokA, map[string]any{})
		if n := instanceContainers(t, data); n != 1 {
			t.Fatalf("%s backend: %d containers, want 1", name, n)
		}
		return p, data
	}
	ephemeralData := ephemeralLeftover(t, root)
	dead, deadData := withSandbox("dead")
	kept, keptData := withSandbox("kept")
	live, liveData := withSandbox("live")

	dead.kill()
	kept.kill()
	if err := os.RemoveAll(deadData); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(liveData); err != nil {
		t.Fatal(err)
	}
	if n := instanceContainers(t, deadData); n != 1 {
		t.Fatalf("before another backend starts, the dead one has %d containers, want its 1", n)
	}
	// The cgroup parent of the dead backend's sandboxes (cgroupfs under
	// v1; the engine's own parent elsewhere, nothing of ours to reap).
	deadParent := filepath.Join("/sys/fs/cgroup/cpu", docker.CgroupParentPrefix+instance.ID(deadData))
	_, err := os.Stat(deadParent)
	ownParent := err == nil

	b, err := startBackend(filepath.Join(root, "next"), testbackend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Backends of other tests in this package start (and reap) at the same
	// time: one of them may hold a dead lease while it reaps, so the
	// removal is awaited, bounded. Without any reaper nothing removes them.
	eventually(t, time.Minute, func() error {
		if n := instanceContainers(t, deadData); n != 0 {
			return fmt.Errorf("the dead backend's containers outlived it: %d left after another backend started", n)
		}
		if n := instanceContainers(t, ephemeralData); n != 0 {
			return fmt.Errorf("a dead ephemeral backend's containers outlived it: %d left", n)
		}
		if _, err := os.Stat(deadParent); ownParent && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the dead backend's cgroup parent %s outlived it (%v)", deadParent, err)
		}
		return nil
	})
	keptParent := filepath.Join("/sys/fs/cgroup/cpu", docker.CgroupParentPrefix+instance.ID(keptData))
	if _, err := os.Stat(keptParent); ownParent && err != nil {
		t.Errorf("a killed backend whose data directory stays lost its cgroup parent: %v", err)
	}
	if n := instanceContainers(t, keptData); n != 1 {
		t.Errorf("a killed backend whose data directory stays lost its containers: %d, want 1", n)
	}
	if n := instanceContainers(t, liveData); n != 1 {
		t.Errorf("a live backend lost its containers: %d, want 1", n)
	}

	// Clean up through the reaper as well: once the others are gone for
	// good, a reap removes theirs.
	live.kill()
	if err := os.RemoveAll(keptData); err != nil {
		t.Fatal(err)
	}
	// Again awaited: a concurrent reaper may hold one of these leases
	// while it removes the same containers.
	reapUntil(t, b, func() error {
		for _, data := range []string{keptData, liveData} {
			if n := instanceContainers(t, data); n != 0 {
				return fmt.Errorf("%s: %d containers left after the reap", data, n)
			}
		}
		return nil
	})
}

// ephemeralLeftover is what a killed test binary leaves: an ephemeral
// backend's lease, not held, its data directory still there, and a
// container of its instance. It returns the data directory.
func ephemeralLeftover(t *testing.T, root string) string {
	t.Helper()
	data := filepath.Join(root, "ephemeral", "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	inst := instance.ID(data)
	if err := os.MkdirAll(instance.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rt, err := docker.New(docker.Options{Instance: inst, Network: docker.NetworkNone, PullPolicy: "never"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := rt.Start(ctx, container.Spec{Image: sbxpkg.ImageBase, Labels: map[string]string{container.LabelSandboxID: "sbx-ephemeral"}, MemoryBytes: 256 << 20, NanoCPUs: 1e9, HomeBytes: 8 << 20, TmpBytes: 8 << 20, MaxProcs: 64}); err != nil {
		t.Fatal(err)
	}
	if n := instanceContainers(t, data); n != 1 {
		t.Fatalf("ephemeral leftover: %d containers, want 1", n)
	}
	// The lease last: a reaper of another test that saw it before the
	// container existed would remove it, and the container, without a
	// lease, would then be no one's to reap.
	if err := os.WriteFile(filepath.Join(instance.Dir, inst+".lock"), []byte(data+"\nephemeral\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return data
}

// deniedBy lists the addresses in the deny set (DENY_ALL sandboxes) of an
// instance's egress table; ok is false when the table does not exist.
func deniedBy(t *testing.T, data string) (addrs []string, ok bool) {
	t.Helper()
	table := egress.TablePrefix + instance.ID(data)
	out, err := exec.Command("nft", "list", "set", "inet", table, "deny").CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file or directory") {
			return nil, false
		}
		t.Fatalf("nft list set inet %s deny: %v: %s", table, err, out)
	}
	_, els, found := strings.Cut(string(out), "elements = {")
	if !found {
		return nil, true
	}
	els, _, _ = strings.Cut(els, "}")
	for _, a := range strings.Split(els, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs, true
}

// TestDeadBackendsEgressTableIsReaped: the egress table of a backend that
// is gone for good (killed, its data directory deleted) goes with its
// containers once another backend starts: its sets would otherwise hold
// the next sandbox given the same address (a DENY_ALL leftover makes that
// sandbox's first lookup fail at once). Controls: the table holds the
// sandbox's address before; a killed backend whose data directory stays
// keeps its table, so its sandbox stays held until it starts again.
func TestDeadBackendsEgressTableIsReaped(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tokens := writeTokens(t, root)
	withDenied := func(name string) (*process, string, string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, name), 0o700); err != nil {
			t.Fatal(err)
		}
		data := filepath.Join(root, name, "data")
		p := startProcess(t, data, tokens, "")
		c := newClient(t, "http://"+p.addr+"/v1")
		c.Running(tokA, map[string]any{"egressMode": "DENY_ALL"})
		addrs, ok := deniedBy(t, data)
		if !ok || len(addrs) != 1 {
			t.Fatalf("%s backend: egress set deny %q (table there: %v), want the sandbox's address", name, addrs, ok)
		}
		return p, data, addrs[0]
	}
	dead, deadData, deadAddr := withDenied("dead")
	kept, keptData, _ := withDenied("kept")
	dead.kill()
	kept.kill()
	if err := os.RemoveAll(deadData); err != nil {
		t.Fatal(err)
	}
	if _, ok := deniedBy(t, deadData); !ok {
		t.Fatal("the dead backend's table is gone before anything reaped it")
	}

	b, err := startBackend(filepath.Join(root, "next"), testbackend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	eventually(t, time.Minute, func() error {
		if n := instanceContainers(t, deadData); n != 0 {
			return fmt.Errorf("%d containers of the dead backend left", n)
		}
		if addrs, ok := deniedBy(t, deadData); ok {
			return fmt.Errorf("the dead backend's egress table outlived it, still denying %q (its sandbox had %s)", addrs, deadAddr)
		}
		// Its address lease went with its container (a lease names the
		// container it is for; another sandbox may hold the address now).
		if holder, err := os.Readlink(filepath.Join("/run/rarecloud/addr", deadAddr)); err == nil {
			if _, err := os.Stat(filepath.Join("/run/rarecloud/netns", holder)); err != nil {
				return fmt.Errorf("the dead backend's sandbox address %s is still leased to %s, whose namespace is gone", deadAddr, holder)
			}
		}
		return nil
	})
	if addrs, ok := deniedBy(t, keptData); !ok || len(addrs) != 1 {
		t.Errorf("a killed backend whose data directory stays lost its egress table (set deny %q, there: %v)", addrs, ok)
	}

	// Once that one is gone for good too, a reap removes its table.
	if err := os.RemoveAll(keptData); err != nil {
		t.Fatal(err)
	}
	reapUntil(t, b, func() error {
		if _, ok := deniedBy(t, keptData); ok {
			return fmt.Errorf("%s: egress table left after the reap", keptData)
		}
		return nil
	})
}

// TestStoppedBackendsWarmPoolIsReaped: a killed backend whose data
// directory stays keeps its sandboxes (it may start again on its records),
// but not its warm containers: no one else can claim them, and its next
// start fills a pool of its own. The one warm container its sandbox
// claimed is that sandbox, and stays.
func TestStoppedBackendsWarmPoolIsReaped(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tokens := writeTokens(t, root)
	data := filepath.Join(root, "kept", "data")
	if err := os.MkdirAll(filepath.Dir(data), 0o700); err != nil {
		t.Fatal(err)
	}
	// One warm container per template (three); the first create claims
	// the base one once it is ready, and the refill makes another.
	p := startProcessArgs(t, data, tokens, "", "--pool-size", "1")
	c := newClient(t, "http://"+p.addr+"/v1")
	eventually(t, 2*time.Minute, func() error {
		if n := instanceContainers(t, data); n != 3 {
			return fmt.Errorf("%d containers, waiting for the three warm ones", n)
		}
		return nil
	})
	sb := c.Running(tokA, map[string]any{"template": "base"})
	eventually(t, 2*time.Minute, func() error {
		if n := instanceContainers(t, data); n != 4 {
			return fmt.Errorf("%d containers, waiting for the sandbox and the refill", n)
		}
		return nil
	})
	p.kill()

	b, err := startBackend(filepath.Join(root, "next"), testbackend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	eventually(t, time.Minute, func() error {
		if n := instanceContainers(t, data); n != 1 {
			return fmt.Errorf("the stopped backend has %d containers, want its sandbox %s alone", n, sb.ID)
		}
		return nil
	})
	// The one left is the sandbox: the backend starts again on its data
	// and the sandbox still runs.
	p2 := startProcess(t, data, tokens, "")
	c2 := newClient(t, "http://"+p2.addr+"/v1")
	if got := c2.Get(tokA, sb.ID); got.Status != "running" {
		t.Fatalf("the sandbox after the reap and a restart: %+v", got)
	}
	c2.Do("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil)
}

// reapUntil runs the reaper of b's engine until check holds (awaited:
// another test's backend may hold a dead lease while it reaps).
func reapUntil(t *testing.T, b *testbackend.Backend, check func() error) {
	t.Helper()
	d := b.Docker()
	if d == nil {
		t.Fatalf("runtime %T: not the Docker runtime", b.Runtime())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eventually(t, time.Minute, func() error {
		if _, err := instance.Reap(ctx, d, nil); err != nil {
			return err
		}
		return check()
	})
}
