package docker

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/hostcpu"
)

// TestCgroupCPUUsage: v1's cpuacct.usage is nanoseconds, v2's usage_usec
// microseconds; a v1 cpu hierarchy's cpu.stat (throttling only) and a
// directory without either hold no accounting; a file that does not parse
// is an error, not a zero.
func TestCgroupCPUUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file, body string
		want             time.Duration
		ok, err          bool
	}{
		{"v1 cpuacct", "cpuacct.usage", "1500000000\n", 1500 * time.Millisecond, true, false},
		{"v2 cpu.stat", "cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n", 2500 * time.Millisecond, true, false},
		{"v1 cpu.stat", "cpu.stat", "nr_periods 10\nnr_throttled 2\nthrottled_time 5000\n", 0, false, false},
		{"nothing", "", "", 0, false, false},
		{"garbage", "cpuacct.usage", "lots\n", 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(dir, tc.file), []byte(tc.body), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, ok, err := cgroupCPUUsage(dir)
			if got != tc.want || ok != tc.ok || (err != nil) != tc.err {
				t.Fatalf("got %v, %v, %v; want %v, %v, error %v", got, ok, err, tc.want, tc.ok, tc.err)
			}
		})
	}
}

// TestSandboxesCPUCountsTheirWork: a sandbox busy with a fixed amount of
// work raises what SandboxesCPU reads by at least a floor the fastest
// machine of this kind still passes (the loop cost 0.84 to 1.50 s of CPU
// on a slower one, 2026-12-06; a quarter of that is still twice the
// floor), by what the sandbox's own cgroup was charged (the instance's
// only container) while a process outside every sandbox kept a CPU busy,
// and by no more than the host was busy meanwhile: the unit is right and
// the count is the instance's sandboxes', not a throttling counter, the
// host's or another cgroup's.
func TestSandboxesCPUCountsTheirWork(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	id := start(t, d, testSpec(t))
	if d.cgroupParent(t.Context()) == "" {
		if _, err := SandboxesCPU(d.instance); err == nil {
			t.Fatal("no own cgroup parent (not the cgroupfs driver), yet SandboxesCPU answered")
		}
		return
	}
	before, err := SandboxesCPU(d.instance)
	if err != nil {
		t.Fatal(err)
	}
	own0 := containerCPU(t, d, id)
	busy0 := hostcpu.Busy()
	// Meanwhile this process keeps a CPU busy outside every sandbox: a
	// count of the host's, not the sandboxes', would take that in.
	var stop atomic.Bool
	spun := make(chan struct{})
	go func() {
		defer close(spun)
		for !stop.Load() {
		}
	}()
	halt := func() {
		if !stop.Swap(true) {
			<-spun
		}
	}
	defer halt() // also when exec fails the test
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done"}})
	halt()
	wantExit(t, res, 0)
	after, err := SandboxesCPU(d.instance)
	if err != nil {
		t.Fatal(err)
	}
	own := containerCPU(t, d, id) - own0
	busy := hostcpu.Busy() - busy0
	used := after - before
	t.Logf("the sandbox's loop: %v of CPU (its own cgroup %v); the host busy %v meanwhile", used, own, busy)
	if used < 100*time.Millisecond {
		t.Errorf("the sandboxes used %v during a loop of about a CPU-second, want at least 100ms", used)
	}
	// The reads are not at one instant: the sandbox's own processes may
	// run between them. The host's busy time is counted in ticks of 10 ms per
	// CPU.
	slack := 50 * time.Millisecond
	if used < own-slack || used > own+slack {
		t.Errorf("the sandboxes used %v, their only container %v", used, own)
	}
	if used > busy+slack {
		t.Errorf("the sandboxes used %v, more than the host was busy (%v)", used, busy)
	}
}

// containerCPU is what the container's own cgroup was charged.
func containerCPU(t *testing.T, d *Runtime, id string) time.Duration {
	t.Helper()
	used, err := cgroupCPU(d.cgroupParent(t.Context()) + "/" + id)
	if err != nil {
		t.Fatal(err)
	}
	return used
}
