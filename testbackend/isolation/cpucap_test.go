package isolation

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// accountShareCPUs is the CPUs one account's sandboxes may use together
// in the shared backend while other accounts have live sandboxes: its
// default host share of the host's CPUs.
func accountShareCPUs() float64 {
	return sandbox.DefaultHostShare * float64(runtime.NumCPU())
}

// TestAccountCPUCappedBesideAnother: while other accounts have live
// sandboxes (here: tests running beside this one, and at least the one
// this test makes for another account), an account whose sandboxes are
// all busy uses at most its share of the host's CPUs, HostShare of them,
// whatever its sandboxes' vCPUs add up to: each container's quota is its
// part of the share, and the CPU the kernel charges its containers in a
// window of at least 2 s stays within the share (10% and 50 ms over it
// for the edges of the window). Without the cap the three busy
// sandboxes would use every CPU of a 2-core host.
func TestAccountCPUCappedBesideAnother(t *testing.T) {
	t.Parallel()
	shareCPUs := accountShareCPUs()
	if shareCPUs >= 3 {
		t.Skipf("an account's share of this host is %.1f CPUs: three 1-vCPU sandboxes are within it", shareCPUs)
	}
	c := backend(t)
	other := c.Running(tokNeighbour, map[string]any{"template": "base"})
	defer c.Raw("DELETE", "/sandboxes/"+other.ID, tokNeighbour, nil, nil)
	capped := c.RunningAll(tokCapped, map[string]any{"template": "base"}, map[string]any{"template": "base"}, map[string]any{"template": "base"})
	defer func() {
		for _, sb := range capped {
			c.Raw("DELETE", "/sandboxes/"+sb.ID, tokCapped, nil, nil)
		}
	}()
	cids := containerIDs(t)
	each := shareCPUs / float64(len(capped))
	waitFor(t, "the capped account's quotas", func() (bool, string) {
		var got []float64
		for _, sb := range capped {
			q, _ := cpuCgroup(t, cids[sb.ID])
			got = append(got, q)
			if math.Abs(q-each) > 0.002 {
				return false, fmt.Sprintf("quotas %v CPUs, want %.3f each", got, each)
			}
		}
		return true, ""
	})

	var wg sync.WaitGroup
	for _, sb := range capped {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			c.Command(tokCapped, id, "nohup timeout 60 sh -c 'while :; do :; done' >/dev/null 2>&1 &", 20000)
		}(sb.ID)
	}
	wg.Wait()
	var usage []func() time.Duration
	for _, sb := range capped {
		_, u := cpuCgroup(t, cids[sb.ID])
		usage = append(usage, u)
	}
	total := func() time.Duration {
		var sum time.Duration
		for _, u := range usage {
			sum += u()
		}
		return sum
	}
	base := total()
	waitFor(t, "the capped account busy", func() (bool, string) {
		used := total() - base
		return used >= 100*time.Millisecond, fmt.Sprintf("used %v", used)
	})
	t0, start := time.Now(), total()
	time.Sleep(2 * time.Second)
	wall, used := time.Since(t0), total()-start
	most := time.Duration(shareCPUs*1.1*float64(wall)) + 50*time.Millisecond
	t.Logf("three busy 1-vCPU sandboxes of one account beside another account's: %v of CPU in %v, %.2f CPUs (its share: %.1f of %d)",
		used.Round(time.Millisecond), wall.Round(time.Millisecond), used.Seconds()/wall.Seconds(), shareCPUs, runtime.NumCPU())
	if used > most {
		t.Errorf("the account's busy sandboxes used %v of CPU in %v, over its share of %.1f CPUs (at most %v)", used, wall, shareCPUs, most)
	}
}
