package isolation

import (
	"context"
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

// cpuCgroup is the engine's CPU controller directory of a container: the
// limit the kernel enforces lives there (cgroup v1 or v2).
func cpuCgroup(t *testing.T, cid string) (quota float64, usage func() time.Duration) {
	t.Helper()
	v1 := filepath.Join("/sys/fs/cgroup/cpu/docker", cid)
	if q, err := os.ReadFile(filepath.Join(v1, "cpu.cfs_quota_us")); err == nil {
		p, err := os.ReadFile(filepath.Join(v1, "cpu.cfs_period_us"))
		if err != nil {
			t.Fatal(err)
		}
		qn, _ := strconv.ParseFloat(strings.TrimSpace(string(q)), 64)
		pn, _ := strconv.ParseFloat(strings.TrimSpace(string(p)), 64)
		acct := filepath.Join("/sys/fs/cgroup/cpuacct/docker", cid, "cpuacct.usage")
		return qn / pn, func() time.Duration {
			b, err := os.ReadFile(acct)
			if err != nil {
				t.Fatal(err)
			}
			ns, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Duration(ns)
		}
	}
	v2 := filepath.Join("/sys/fs/cgroup/system.slice", "docker-"+cid+".scope")
	b, err := os.ReadFile(filepath.Join(v2, "cpu.max"))
	if err != nil {
		t.Fatalf("no CPU cgroup for container %s (v1 %s, v2 %s): %v", cid, v1, v2, err)
	}
	f := strings.Fields(string(b))
	qn, _ := strconv.ParseFloat(f[0], 64)
	pn, _ := strconv.ParseFloat(f[1], 64)
	return qn / pn, func() time.Duration {
		b, err := os.ReadFile(filepath.Join(v2, "cpu.stat"))
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
// template's vCPU for each template. Then three busy processes in a 1-vCPU
// sandbox: over their run the sandbox's CPU time stays within its quota
// (plus one period's slack per second); whether throttling was needed
// depends on how busy the machine is, and is only reported.
func TestCPULimit(t *testing.T) {
	t.Parallel()
	c := backend(t)
	tpls := apitest.DecodeData[[]sandbox.Template](t, c.Do("GET", "/sandboxes/templates", tokA, nil, nil))
	vcpu := map[string]float64{}
	for _, tpl := range tpls {
		vcpu[tpl.Name] = tpl.VCPU
	}
	boxes := c.RunningAll(tokA, map[string]any{"template": "base", "image": sandbox.ImagePython}, map[string]any{"template": "python"})
	cids := containerIDs(t)
	// On an engine with fewer CPUs than a template's vCPUs, the limit is
	// the engine's CPUs (the engine refuses more).
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cpus := float64(shared.Docker().EngineCPUs(ctx))
	cancel()
	if cpus == 0 {
		t.Fatal("the engine does not say how many CPUs it has")
	}
	for i, name := range []string{"base", "python"} {
		quota, _ := cpuCgroup(t, cids[boxes[i].ID])
		if want := min(vcpu[name], cpus); quota != want {
			t.Errorf("%s sandbox %s: CPU quota %.2f vCPU, want %.2f (the template says %.2f, the engine has %.0f CPUs)", name, boxes[i].ID, quota, want, vcpu[name], cpus)
		}
	}

	quota, usage := cpuCgroup(t, cids[boxes[0].ID])
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
	before, t0 := usage(), time.Now()
	res := c.python(boxes[0].ID, burn, 60000)
	used, wall := usage()-before, time.Since(t0)
	if strings.TrimSpace(res.Stdout) != "burnt" {
		t.Fatalf("burner: %v", res)
	}
	limit := time.Duration(float64(wall) * quota * 1.1)
	t.Logf("three busy processes in a %.1f-vCPU sandbox: %v of CPU in %v (limit %v)", quota, used.Round(time.Millisecond), wall.Round(time.Millisecond), limit.Round(time.Millisecond))
	if used > limit {
		t.Errorf("the sandbox used %v of CPU in %v with a quota of %.1f vCPU", used, wall, quota)
	}
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
