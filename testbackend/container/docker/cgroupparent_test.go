package docker

import (
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// TestOwnCgroupParent: under the engine's cgroupfs driver a container's
// cgroup is under the runtime's own parent, whose weight is what
// SetTotalCPUWeight last asked for: given once a container under it is
// weighed when asked before, again when the parent was removed and made
// anew for a later container; out of range refused. Close removes the
// parent once its last container is gone, in every hierarchy. Under the
// systemd driver the parent is the engine's, and its weight is refused
// as not weighable.
func TestOwnCgroupParent(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := d.SetTotalCPUWeight(ctx, 3*container.DefaultCPUWeight)
	if driver := d.engineFacts(ctx).cgroupDriver; driver != engineCgroupfs {
		if !errors.Is(err, container.ErrCannotWeigh) {
			t.Fatalf("the engine's %s driver: SetTotalCPUWeight %v, want ErrCannotWeigh", driver, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("before any container: %v", err)
	}

	// Where the parent's weight lives: the cpu hierarchy's v1 shares, or
	// v2's weight, mapped.
	parent, file, value := filepath.Join("/sys/fs/cgroup", cgroupParentName(d.instance)), "cpu.weight", weightV2
	if _, err := os.Stat("/sys/fs/cgroup/cpu"); err == nil {
		parent, file, value = filepath.Join("/sys/fs/cgroup/cpu", cgroupParentName(d.instance)), "cpu.shares", func(w int) int { return w }
	}
	want := func(when string, w int) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(parent, file))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if got := strings.TrimSpace(string(b)); got != strconv.Itoa(value(w)) {
			t.Fatalf("%s: the parent weighs %s, want %d", when, got, value(w))
		}
	}
	weighed := func() string {
		t.Helper()
		id := start(t, d, testSpec(t))
		if _, err := os.Stat(filepath.Join(parent, id)); err != nil {
			t.Fatalf("the container's cgroup is not under the runtime's own parent: %v", err)
		}
		if err := d.SetCPUWeight(ctx, id, 512); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := weighed()
	want("asked before the first container", 3*container.DefaultCPUWeight)
	for _, w := range []int{container.MinCPUWeight, 2 * container.DefaultCPUWeight} {
		if err := d.SetTotalCPUWeight(ctx, w); err != nil {
			t.Fatalf("weight %d: %v", w, err)
		}
		want("set", w)
	}
	for _, w := range []int{0, 1, container.MaxCPUWeight + 1} {
		if err := d.SetTotalCPUWeight(ctx, w); err == nil {
			t.Errorf("weight %d accepted", w)
		}
	}

	// Removed once empty (as the reaper would), made anew for the next
	// container at the kernel's default: the weight comes back with it.
	if err := d.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := RemoveCgroupParent(d.instance, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(parent); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the empty parent was not removed: %v", err)
	}
	id = weighed()
	want("made anew", 2*container.DefaultCPUWeight)

	if err := d.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(parent); err != nil {
		t.Fatalf("the parent went before Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{parent, filepath.Join("/sys/fs/cgroup/memory", cgroupParentName(d.instance))} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s outlived Close: %v", dir, err)
		}
	}
}

// TestRemoveCgroupParentTakesLeftovers: for the reaper, a container
// cgroup the engine left behind (a crashed engine's: no process in it)
// does not keep the parent; one with a process does, and the process
// stays in it. For Close, an empty container cgroup is left alone.
func TestRemoveCgroupParentTakesLeftovers(t *testing.T) {
	t.Parallel()
	root := "/sys/fs/cgroup" // v2; v1: its cpu hierarchy
	if _, err := os.Stat("/sys/fs/cgroup/cpu"); err == nil {
		root = "/sys/fs/cgroup/cpu"
	}
	inst := "rt-test-" + randomID(t)
	parent := filepath.Join(root, cgroupParentName(inst))
	left := filepath.Join(parent, strings.Repeat("a", 64))
	busy := filepath.Join(parent, strings.Repeat("b", 64))
	for _, dir := range []string{left, busy} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sleeper := osexec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleeper.Process.Kill()
		_ = sleeper.Wait()
		_ = os.Remove(busy)
		_ = os.Remove(parent)
	})
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	// Without leftovers (Close, for an instance that may be alive) the
	// empty container cgroup stays, and so does the parent.
	if err := RemoveCgroupParent(inst, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); err != nil {
		t.Fatalf("the empty container cgroup went without leftovers: %v", err)
	}
	if err := RemoveCgroupParent(inst, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the left-behind cgroup stays: %v", err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("the cgroup with a process went: %v", err)
	}
	// Its process out, the parent goes too.
	if err := os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	if err := RemoveCgroupParent(inst, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(parent); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the parent stays once empty: %v", err)
	}
}

// TestCgroupParentName: an instance id becomes one path element of the
// prefix and safe characters, however it is spelled.
func TestCgroupParentName(t *testing.T) {
	for in, want := range map[string]string{
		"0123456789ab":           "rarecloud-0123456789ab",
		"bench-floor-42":         "rarecloud-bench-floor-42",
		"../../etc":              "rarecloud-.._.._etc",
		"a/b c":                  "rarecloud-a_b_c",
		strings.Repeat("x", 100): "rarecloud-" + strings.Repeat("x", 64),
	} {
		if got := cgroupParentName(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
