package isolation

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// attackers is how many sandboxes attack the control channel at once.
const attackers = 10

// attack is what sandbox code would try against the channel between the
// backend and the agent (the sandbox's pid 1): one 60 MB line into its
// stdout, a forged request into its stdin, a look at where its
// descriptors lead (reading them needs the same access as opening them).
const attack = `printf '%60000000s\n' x > /proc/1/fd/1; echo "stdout:$?"; ` +
	`printf '{"id":1,"argv":["true"]}\n' > /proc/1/fd/0; echo "stdin:$?"; ` +
	`readlink /proc/1/fd/0 /proc/1/fd/1 >/dev/null; echo "fds:$?"`

// sandboxes starts n sandboxes of account a at once.
func sandboxes(c *apiClient, n int) []string {
	bodies := make([]map[string]any, n)
	for i := range bodies {
		bodies[i] = map[string]any{"template": "base"}
	}
	var ids []string
	for _, sb := range c.RunningAll(tokA, bodies...) {
		ids = append(ids, sb.ID)
	}
	return ids
}

// TestControlChannelOutOfReach: sandbox code can neither write into nor
// read from the channel between the backend and its agent. The agent is
// not dumpable, so its /proc entries belong to root: the writes and the
// look at its descriptors fail, from ten sandboxes at once, and every one
// of them answers normally afterwards.
func TestControlChannelOutOfReach(t *testing.T) {
	t.Parallel()
	c := backend(t)
	ids := sandboxes(c, attackers)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := c.command(id, attack, 60000)
			for _, step := range []string{"stdout", "stdin", "fds"} {
				if !strings.Contains(res.Stdout, step+":") || strings.Contains(res.Stdout, step+":0") {
					t.Errorf("%s: the %s step of the attack was not refused: %v", id, step, res)
				}
			}
			if !strings.Contains(res.Stderr, "Permission denied") {
				t.Errorf("%s: no permission error: %v", id, res)
			}
		}()
	}
	wg.Wait()
	for _, id := range ids {
		if out := ok(t, "after the attack", c.command(id, "echo fine", 10000)); out != "fine\n" {
			t.Fatalf("%s after the attack: %q", id, out)
		}
	}
}

// hostileBound is what ten sandboxes writing into their agents' channel
// at once may add to the backend's resident memory: each session reads at
// most one frame of a command's answer (runtime frame limit for 1 MiB of
// output per stream, about 2.8 MB) before it is dropped; twice that for
// the growing buffer, and 32 MiB for the rest of the process.
func hostileBound() int64 {
	return attackers*2*int64(2*((sandbox.MaxExecOutput+2)/3*4)+64<<10) + 32<<20
}

// TestHostileAgentOutputBounded: the backend's own defence, with an agent
// that sandbox code can reach (dumpable, as agents were before): ten
// sandboxes write 60 MB lines into their agents' stdout at once. The
// backend reads a bounded amount from each, drops the session, and stops
// the sandbox: each attacker ends terminated with a reason saying so,
// while a bystander keeps answering and the backend's RSS stays within
// hostileBound. Not parallel: the RSS is this process's.
func TestHostileAgentOutputBounded(t *testing.T) {
	requireEngine(t)
	dir := t.TempDir()
	agentPath, err := buildAgent(dir, dumpableAgentPkg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := startBackend(filepath.Join(dir, "data"), testbackend.Config{Network: docker.NetworkNone, HomeBytes: smallDisk, TmpBytes: smallDisk, Agent: agentPath})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := newClient(t, b.URL())
	ids := sandboxes(c, attackers+1)
	attackerIDs, bystander := ids[:attackers], ids[attackers]
	marker := "bystander-" + randomHex(6)
	if r := c.writeFile(bystander, "/home/user/marker", marker+"\n"); r.Status != http.StatusOK {
		t.Fatalf("write marker: %v", r)
	}

	goruntime.GC()
	base := rss(t)
	stop := make(chan struct{})
	var peak int64
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			peak = max(peak, rss(t))
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	var probes int
	var probeWG sync.WaitGroup
	probeStop := make(chan struct{})
	probeWG.Add(1)
	go func() {
		defer probeWG.Done()
		probes, _ = watchBystander(t, c, attackerIDs[0], bystander, marker, probeStop)
	}()

	var wg sync.WaitGroup
	for _, id := range attackerIDs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := c.Do("POST", "/sandboxes/"+id+"/commands", tokA, map[string]any{"cmd": attack, "timeoutMs": 60000}, nil)
			if r.Status != http.StatusConflict || r.ErrCode() != "SANDBOX_NOT_RUNNING" {
				t.Errorf("%s: the attack's command answered %v, want 409 SANDBOX_NOT_RUNNING", id, r)
			}
		}()
	}
	wg.Wait()
	close(probeStop)
	probeWG.Wait()
	close(stop)
	sampler.Wait()
	t.Logf("backend RSS %d MiB before the attack, peak %d MiB during it (bound +%d MiB); %d bystander probes meanwhile",
		base>>20, peak>>20, hostileBound()>>20, probes)
	if peak-base > hostileBound() {
		t.Errorf("the attack raised the backend's RSS by %d MiB, bound %d MiB", (peak-base)>>20, hostileBound()>>20)
	}

	for _, id := range attackerIDs {
		sb := c.WaitStatus(tokA, id, apitest.WaitTimeout, "terminated")
		if sb.TerminationReason != "agent_failure" || !strings.Contains(sb.TerminationMessage, "channel between the backend and its agent") || sb.TerminatedAt == "" {
			t.Errorf("%s ended with reason %q (%q), want agent_failure with a message naming the channel", id, sb.TerminationReason, sb.TerminationMessage)
		}
	}
	t.Logf("an attacker's reason: %s", c.Get(tokA, attackerIDs[0]).TerminationMessage)
	checkBystander(t, c, bystander, marker)
	for _, id := range ids {
		c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil)
	}
}

// rss is this process's resident set size in bytes.
func rss(t *testing.T) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Error(err)
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Error(err)
			}
			return kb << 10
		}
	}
	t.Error(fmt.Errorf("no VmRSS in /proc/self/status"))
	return 0
}
