package isolation

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// engineCgroup is the directory where the engine keeps a container's
// cgroup: under cgroup v1 in controller's hierarchy (the cgroupfs
// driver's PARENT/ID, the parent the runtime's own or the engine's
// docker), under v2 in systemd's scope; v2 says which. The test fails
// when neither is there.
func engineCgroup(t *testing.T, cid, controller string) (dir string, v2 bool) {
	t.Helper()
	v1 := filepath.Join("/sys/fs/cgroup", controller, "*", cid)
	if found, _ := filepath.Glob(v1); len(found) == 1 {
		return found[0], false
	}
	scope := filepath.Join("/sys/fs/cgroup/system.slice", "docker-"+cid+".scope")
	if _, err := os.Stat(scope); err != nil {
		t.Fatalf("no %s cgroup for container %s (v1 %s, v2 %s)", controller, cid, v1, scope)
	}
	return scope, true
}

// cpuCgroup is the engine's CPU controller directory of a container: the
// limit the kernel enforces lives there (cgroup v1 or v2).
func cpuCgroup(t *testing.T, cid string) (quota float64, usage func() time.Duration) {
	t.Helper()
	dir, v2 := engineCgroup(t, cid, "cpu")
	if !v2 {
		q, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_quota_us"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := os.ReadFile(filepath.Join(dir, "cpu.cfs_period_us"))
		if err != nil {
			t.Fatal(err)
		}
		qn, _ := strconv.ParseFloat(strings.TrimSpace(string(q)), 64)
		pn, _ := strconv.ParseFloat(strings.TrimSpace(string(p)), 64)
		acctDir, _ := engineCgroup(t, cid, "cpuacct")
		acct := filepath.Join(acctDir, "cpuacct.usage")
		return qn / pn, func() time.Duration {
			b, err := os.ReadFile(acct)
			if err != nil {
				t.Fatal(err)
			}
			ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Duration(ns)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	qn, _ := strconv.ParseFloat(f[0], 64)
	pn, _ := strconv.ParseFloat(f[1], 64)
	return qn / pn, func() time.Duration {
		b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, _ := strconv.ParseInt(v, 10, 64)
				return time.Duration(us) * time.Microsecond
			}
		}
		t.Fatal("no usage_usec in cpu.stat")
		return 0
	}
}

// TestCPULimit: a sandbox gets its template's vCPUs and no more. The limit
// is the kernel's CFS quota on the sandbox's cgroup: it must equal the
// template's vCPU for each template, or, while other accounts have live
// sandboxes (the tests beside this one), its part of its account's share
// of the host (TestAccountCPUCappedBesideAnother), once the rests of the
// account's starts are over: the account is this test's alone, so its
// vCPUs are the two sandboxes'. Then three busy
// processes in a 1-vCPU sandbox: over their run the sandbox's CPU time
// stays within its template's vCPU (plus one period's slack per second);
// whether throttling was needed depends on how busy the machine is, and
// is only reported.
func TestCPULimit(t *testing.T) {
	t.Parallel()
	c := backend(t)
	tpls := apitest.DecodeData[[]sandbox.Template](t, c.Do("GET", "/sandboxes/templates", tokLimit, nil, nil))
	vcpu := map[string]float64{}
	for _, tpl := range tpls {
		vcpu[tpl.Name] = tpl.VCPU
	}
	boxes := c.RunningAll(tokLimit, map[string]any{"template": "base", "image": sandbox.ImagePython}, map[string]any{"template": "python"})
	cids := containerIDs(t)
	// On an engine with fewer CPUs than a template's vCPUs, the limit is
	// the engine's CPUs (the engine refuses more).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cpus := float64(shared.Docker().EngineCPUs(ctx))
	cancel()
	if cpus == 0 {
		t.Fatal("the engine does not say how many CPUs it has")
	}
	share := accountShareCPUs()
	total := vcpu["base"] + vcpu["python"]
	for i, name := range []string{"base", "python"} {
		want := min(vcpu[name], cpus)
		capped := min(want, vcpu[name]*min(1, share/total))
		// Beside other accounts, the account's starts take part of its
		// share until their rests are over (TestStartsCountAgainstCPUShare).
		waitFor(t, name+" sandbox's CPU quota", func() (bool, string) {
			quota, _ := cpuCgroup(t, cids[boxes[i].ID])
			return math.Abs(quota-want) <= 0.002 || math.Abs(quota-capped) <= 0.002,
				fmt.Sprintf("%s: %.3f vCPU, want %.3f (the template says %.2f, the engine has %.0f CPUs), or %.3f beside other accounts", boxes[i].ID, quota, want, vcpu[name], cpus, capped)
		})
	}

	_, usage := cpuCgroup(t, cids[boxes[0].ID])
	quota := min(vcpu["base"], cpus) // the cap may come and go as the tests beside end
	burn := `
import os, time
pids = []
for i in range(3):
    p = os.fork()
    if p == 0:
        end = time.monotonic() + 4
        while time.monotonic() < end:
            pass
        os._exit(0)
    pids.append(p)
for p in pids:
    os.waitpid(p, 0)
print("burnt")
`
	n0, s0 := throttling(t, cids[boxes[0].ID])
	before, t0 := usage(), time.Now()
	res := c.pythonAs(tokLimit, boxes[0].ID, burn, 60000)
	used, wall := usage()-before, time.Since(t0)
	n1, s1 := throttling(t, cids[boxes[0].ID])
	if strings.TrimSpace(res.Stdout) != "burnt" {
		t.Fatalf("burner: %v", res)
	}
	limit := time.Duration(float64(wall) * quota * 1.1)
	t.Logf("three busy processes in a %.1f-vCPU sandbox: %v of CPU in %v (limit %v)", quota, used.Round(time.Millisecond), wall.Round(time.Millisecond), limit.Round(time.Millisecond))
	if used > limit {
		t.Errorf("the sandbox used %v of CPU in %v with a quota of %.1f vCPU", used, wall, quota)
	}
	// A throttled sandbox waits for the next period: with the engine's
	// default period (100 ms) a burst on every CPU stopped the whole
	// sandbox, agent included, for about 50 ms at a time. No stop may be
	// longer than the sandbox's period (10 ms); the kernel counts a stop
	// once on each CPU it stops. On a machine too busy for the burners to
	// exceed the quota there is no stop at all.
	t.Logf("throttled %d times, %v in all", n1-n0, s1-s0)
	if n, most := n1-n0, 10*time.Millisecond*time.Duration(cpus); n > 0 && (s1-s0)/time.Duration(n) > most {
		t.Errorf("the sandbox was stopped %d times for %v in all: %v each, want at most one 10 ms period on each of the %.0f CPUs", n, s1-s0, (s1-s0)/time.Duration(n), cpus)
	}
}

// throttling is how often the kernel has stopped a container for its
// CPU quota, and for how long in all (cgroup v1 or v2).
func throttling(t *testing.T, cid string) (periods int64, stalled time.Duration) {
	t.Helper()
	dir, v2 := engineCgroup(t, cid, "cpu")
	unit, key := time.Nanosecond, "throttled_time "
	if v2 {
		unit, key = time.Microsecond, "throttled_usec "
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "nr_throttled "); ok {
			periods, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			stalled = time.Duration(n) * unit
		}
	}
	return periods, stalled
}

// containerIDs maps the shared backend's sandboxes to their containers.
func containerIDs(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := shared.Runtime().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ct := range list {
		if id := ct.Labels[container.LabelSandboxID]; id != "" {
			out[id] = ct.ID
		}
	}
	return out
}
