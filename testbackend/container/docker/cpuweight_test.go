package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// kernelCPUWeight reads a container's weight where the engine puts its
// cgroup (cgroupfs under v1, systemd's scope under v2), not where
// cpuweight.go finds it.
func kernelCPUWeight(t *testing.T, d *Runtime, id string) string {
	t.Helper()
	dir, v2 := kernelCgroup(t, d, id)
	if v2 {
		return readCgroupFile(t, dir, "cpu.weight")
	}
	return readCgroupFile(t, dir, "cpu.shares")
}

// kernelCPULimit is the container's CFS quota and period, "quota period"
// as cgroup v2's cpu.max says them.
func kernelCPULimit(t *testing.T, d *Runtime, id string) string {
	t.Helper()
	dir, v2 := kernelCgroup(t, d, id)
	if v2 {
		return readCgroupFile(t, dir, "cpu.max")
	}
	return readCgroupFile(t, dir, "cpu.cfs_quota_us") + " " + readCgroupFile(t, dir, "cpu.cfs_period_us")
}

// kernelCgroup is the directory of the container's CPU cgroup, and
// whether it is cgroup v2's.
func kernelCgroup(t *testing.T, d *Runtime, id string) (dir string, v2 bool) {
	t.Helper()
	for _, c := range []struct {
		dir string
		v2  bool
	}{
		{filepath.Join("/sys/fs/cgroup/cpu", cgroupParentName(d.instance), id), false},
		{filepath.Join("/sys/fs/cgroup/cpu/docker", id), false},
		{filepath.Join("/sys/fs/cgroup/system.slice", "docker-"+id+".scope"), true},
		{filepath.Join("/sys/fs/cgroup/docker", id), true},
	} {
		if _, err := os.Stat(c.dir); err == nil {
			return c.dir, c.v2
		}
	}
	t.Fatalf("no CPU cgroup for container %s", id)
	return "", false
}

func readCgroupFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestCPUWeightReachesTheKernel: the weight a start asks for and each one
// set later are the kernel's for the container's cgroup; a weight out of
// range is refused, and a removed container is ErrNotFound.
func TestCPUWeightReachesTheKernel(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	spec := testSpec(t)
	spec.CPUWeight = 300
	id := start(t, d, spec)
	v2 := func(w int) string {
		if _, err := os.Stat("/sys/fs/cgroup/cpu"); err == nil {
			return strconv.Itoa(w)
		}
		return strconv.Itoa(weightV2(w))
	}
	if got := kernelCPUWeight(t, d, id); got != v2(300) {
		t.Fatalf("started with weight 300: the kernel has %s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, w := range []int{77, container.MinCPUWeight, container.DefaultCPUWeight} {
		if err := d.SetCPUWeight(ctx, id, w); err != nil {
			t.Fatal(err)
		}
		if got := kernelCPUWeight(t, d, id); got != v2(w) {
			t.Fatalf("weight %d set: the kernel has %s", w, got)
		}
	}
	for _, w := range []int{0, 1, -5, container.MaxCPUWeight + 1} {
		if err := d.SetCPUWeight(ctx, id, w); err == nil {
			t.Errorf("weight %d accepted", w)
		}
	}
	if err := d.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := d.SetCPUWeight(ctx, id, 100); !errors.Is(err, container.ErrNotFound) {
		t.Fatalf("a removed container's weight: %v, want ErrNotFound", err)
	}
}

// TestCPULimitReachesTheKernel: the limit a start asks for and each one
// set later are the kernel's quota for the container's cgroup, a limit
// under a tenth of a CPU in a longer period; a limit that is not positive
// is refused, and a removed container is ErrNotFound.
func TestCPULimitReachesTheKernel(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	spec := testSpec(t)
	spec.NanoCPUs = 5e8
	id := start(t, d, spec)
	if got := kernelCPULimit(t, d, id); got != "5000 10000" {
		t.Fatalf("started with half a CPU: the kernel has %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		nano int64
		want string
	}{{25e7, "2500 10000"}, {5e7, "1000 20000"}, {1e9, "10000 10000"}} {
		if err := d.SetCPULimit(ctx, id, c.nano); err != nil {
			t.Fatal(err)
		}
		if got := kernelCPULimit(t, d, id); got != c.want {
			t.Fatalf("limit %d set: the kernel has %q, want %q", c.nano, got, c.want)
		}
	}
	for _, nano := range []int64{0, -1} {
		if err := d.SetCPULimit(ctx, id, nano); err == nil {
			t.Errorf("limit %d accepted", nano)
		}
	}
	if err := d.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := d.SetCPULimit(ctx, id, 1e9); !errors.Is(err, container.ErrNotFound) {
		t.Fatalf("a removed container's limit: %v, want ErrNotFound", err)
	}
}

// TestCPUFileOf: the weight file is found from a process's cgroups and the
// mounts, for cgroup v1 (a cpu controller mounted alone or with others,
// at the root or below it) and v2, and refused when no hierarchy holds it.
func TestCPUFileOf(t *testing.T) {
	const v1Mounts = `25 24 0:22 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
26 24 0:23 / /sys/fs/cgroup/cpu rw,nosuid shared:9 - cgroup cgroup rw,cpu
27 24 0:24 / /sys/fs/cgroup/cpuacct rw,nosuid - cgroup cgroup rw,cpuacct
`
	const v2Mounts = "30 24 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
	for _, c := range []struct {
		name, groups, mounts string
		want                 cpuWeightFile
		bad                  bool
	}{
		{name: "v1", groups: "4:memory:/docker/abc\n2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n0::/\n", mounts: v1Mounts,
			want: cpuWeightFile{path: "/sys/fs/cgroup/cpu/docker/abc/cpu.shares"}},
		{name: "v1 cpu,cpuacct", groups: "3:cpu,cpuacct:/rc/a/abc\n", mounts: "26 24 0:23 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n",
			want: cpuWeightFile{path: "/sys/fs/cgroup/cpu,cpuacct/rc/a/abc/cpu.shares"}},
		{name: "v1 mounted below its root", groups: "1:cpu:/outer/docker/abc\n", mounts: "26 24 0:23 /outer /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n",
			want: cpuWeightFile{path: "/sys/fs/cgroup/cpu/docker/abc/cpu.shares"}},
		{name: "v2", groups: "0::/system.slice/docker-abc.scope\n", mounts: v2Mounts,
			want: cpuWeightFile{path: "/sys/fs/cgroup/system.slice/docker-abc.scope/cpu.weight", v2: true}},
		{name: "outside the mount", groups: "1:cpu:/elsewhere/abc\n", mounts: "26 24 0:23 /outer /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", bad: true},
		{name: "dot-dot", groups: "1:cpu:/docker/../../etc\n", mounts: v1Mounts, bad: true},
		{name: "no cpu controller", groups: "4:memory:/docker/abc\n", mounts: v1Mounts, bad: true},
		{name: "cpuacct is not cpu", groups: "2:cpuacct:/docker/abc\n", mounts: "27 24 0:24 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n", bad: true},
	} {
		got, err := cpuFileOf(c.groups, c.mounts)
		switch {
		case c.bad && err == nil:
			t.Errorf("%s: %+v, want an error", c.name, got)
		case !c.bad && (err != nil || got != c.want):
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

// TestOwnCgroup: only a cgroup named after the container's full id is
// weighed; another process's (the engine's pid on another host) is not.
func TestOwnCgroup(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		path string
		ok   bool
	}{
		{"/sys/fs/cgroup/cpu/docker/" + id + "/cpu.shares", true},
		{"/sys/fs/cgroup/system.slice/docker-" + id + ".scope/cpu.weight", true},
		{"/sys/fs/cgroup/cpu/user.slice/cpu.shares", false},
		{"/sys/fs/cgroup/cpu/cpu.shares", false},
		{"/sys/fs/cgroup/cpu/docker/" + id[:12] + "/cpu.shares", false},
	} {
		if err := ownCgroup(cpuWeightFile{path: c.path}, id); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.path, err, c.ok)
		}
	}
	if err := ownCgroup(cpuWeightFile{path: "/sys/fs/cgroup/cpu/cpu.shares"}, ""); err == nil {
		t.Error("an empty id matched")
	}
}
