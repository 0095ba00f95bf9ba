package isolation

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// answerBound is how long the backend and a bystander sandbox may take to
// answer while another sandbox misbehaves: loose, the machine is shared.
const answerBound = 10 * time.Second

// watchBystander probes the backend and a bystander sandbox until stop is
// closed, and returns how many probes ran and the slowest answer. Failures
// are reported on t (from this goroutine with Errorf).
func watchBystander(t *testing.T, c *apiClient, victim, bystander, marker string, stop <-chan struct{}) (probes int, slowest time.Duration) {
	t.Helper()
	for {
		select {
		case <-stop:
			return probes, slowest
		case <-time.After(200 * time.Millisecond):
		}
		r := c.Do("POST", "/sandboxes/"+bystander+"/commands", tokA, map[string]any{"cmd": "cat /home/user/marker", "timeoutMs": 20000}, nil)
		if r.Status != http.StatusOK || !strings.Contains(string(r.Env.Data), marker) {
			t.Errorf("bystander during the abuse: %v", r)
		}
		slowest = max(slowest, r.Elapsed)
		g := c.Do("GET", "/sandboxes/"+victim, tokA, nil, nil)
		if g.Status != http.StatusOK {
			t.Errorf("backend during the abuse: GET victim %v", g)
		}
		slowest = max(slowest, g.Elapsed)
		if r.Elapsed > answerBound || g.Elapsed > answerBound {
			t.Errorf("answers during the abuse took %v (bystander) and %v (backend), bound %v", r.Elapsed, g.Elapsed, answerBound)
		}
		probes++
	}
}

// afterAbuse waits until the victim answers again or has been terminated
// with a reason; anything else fails. It returns what happened.
func afterAbuse(t *testing.T, c *apiClient, victim string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		sb := c.Get(tokA, victim)
		switch sb.Status {
		case "terminated":
			if sb.TerminationReason == "" {
				t.Fatalf("victim terminated without a reason: %+v", sb)
			}
			return "terminated: " + sb.TerminationReason + ": " + sb.TerminationMessage
		case "running":
			r := c.Do("POST", "/sandboxes/"+victim+"/commands", tokA, map[string]any{"cmd": "echo alive; ps -e --no-headers | wc -l", "timeoutMs": 10000}, nil)
			if r.Status == http.StatusOK {
				res := apitest.DecodeData[apitest.ExecResult](t, r)
				if res.ExitCode != nil && *res.ExitCode == 0 && strings.HasPrefix(res.Stdout, "alive\n") {
					return "still answers; processes: " + strings.TrimSpace(strings.TrimPrefix(res.Stdout, "alive\n"))
				}
				last = res.String()
			} else {
				last = r.String()
			}
		default:
			t.Fatalf("victim in status %s", sb.Status)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("victim neither answers nor was terminated 60 s after the abuse; last answer %s", last)
	return ""
}

// checkBystander proves the bystander was untouched: same marker, answers.
func checkBystander(t *testing.T, c *apiClient, bystander, marker string) {
	t.Helper()
	if sb := c.Get(tokA, bystander); sb.Status != "running" {
		t.Fatalf("bystander: %+v", sb)
	}
	out := ok(t, "bystander", c.command(bystander, "cat /home/user/marker; echo ok > /home/user/after; cat /home/user/after", 10000))
	if out != marker+"\nok\n" {
		t.Fatalf("bystander after the abuse: %q", out)
	}
}

// abuse runs the hostile request in the victim while watching the
// bystander, and returns the hostile request's answer.
func abuse(t *testing.T, c *apiClient, victim, bystander, marker, path string, body map[string]any) apitest.Response {
	t.Helper()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var probes int
	var slowest time.Duration
	wg.Add(1)
	go func() {
		defer wg.Done()
		probes, slowest = watchBystander(t, c, victim, bystander, marker, stop)
	}()
	t0 := time.Now()
	r := c.Do("POST", "/sandboxes/"+victim+path, tokA, body, nil)
	took := time.Since(t0)
	close(stop)
	wg.Wait()
	t.Logf("hostile request answered after %v; %d probes of the bystander and the backend meanwhile, slowest %v",
		took.Round(time.Millisecond), probes, slowest.Round(time.Millisecond))
	if probes < 3 {
		t.Errorf("only %d probes ran during the abuse", probes)
	}
	return r
}

func setupPair(t *testing.T, c *apiClient, victimBody map[string]any) (victim, bystander, marker string) {
	t.Helper()
	boxes := c.RunningAll(tokA, victimBody, map[string]any{"template": "base"})
	victim, bystander = boxes[0].ID, boxes[1].ID
	marker = "bystander-" + randomHex(6)
	if r := c.writeFile(bystander, "/home/user/marker", marker+"\n"); r.Status != http.StatusOK {
		t.Fatalf("write marker: %v", r)
	}
	return victim, bystander, marker
}

// TestForkBombContained: a fork bomb stays inside its sandbox. Contained
// means: the backend and another sandbox keep answering meanwhile; a limit
// of the sandbox stops the bomb's growth; afterwards the victim answers
// again, or has ended terminated with a reason. Which limit fires first
// depends on the machine, so every honest one is accepted, and the test
// says which one fired:
//
//   - the process limit: a fork fails (EAGAIN, "Cannot fork" from the
//     shell); the bomb is stopped as soon as the first failure is seen;
//   - the memory limit inside the sandbox: the bomb is killed with SIGKILL
//     (its timeout, which sends only SIGTERM, ends with 137);
//   - the memory limit of the whole sandbox: the request answers
//     SANDBOX_NOT_RUNNING and the victim ends terminated with a reason.
//
// How long the bomb needs to reach a limit depends on the machine's speed
// and load (on a loaded 2-core machine 20 s was not always enough), so the
// bomb does not run for a fixed time: it runs until a limit fires, and its
// timeout (150 s) is only a safety net; a bomb that reaches it fails.
func TestForkBombContained(t *testing.T) {
	t.Parallel()
	c := backend(t)
	victim, bystander, marker := setupPair(t, c, map[string]any{"template": "base"})

	// The classic bomb in dash syntax (a function called ":" is bash's).
	// The bomb's shell replaces itself with sleep (exec needs no fork), so
	// it waits whatever the limit. Its errors go to a fifo that the
	// command's own shell reads with builtins only (read, case, kill: no
	// fork, so it works while the process limit is full): at the first
	// failed fork it kills the bomb's process group (timeout makes one),
	// then kill -9 -1 sweeps anything that escaped the group.
	bomb := `mkfifo /tmp/bomb.err || exit 90
timeout -s TERM 150 sh -c 'b() { b | b & }; b; exec sleep 600' 2>/tmp/bomb.err &
pg=$!
hit=""
while IFS= read -r l; do
  case "$l" in *"Cannot fork"*|*"temporarily unavailable"*) hit="$l"; break;; esac
done </tmp/bomb.err
if [ -n "$hit" ]; then echo "fork-failed: $hit"; kill -9 -"$pg" 2>/dev/null; fi
wait "$pg"; echo "bomb-exit:$?"
kill -9 -1 2>/dev/null; echo swept`
	r := abuse(t, c, victim, bystander, marker, "/commands", map[string]any{"cmd": bomb, "timeoutMs": 200000})
	mechanism := ""
	switch {
	case r.Status == http.StatusOK:
		res := apitest.DecodeData[apitest.ExecResult](t, r)
		switch {
		case strings.Contains(res.Stdout, "fork-failed: "):
			line := res.Stdout[strings.Index(res.Stdout, "fork-failed: "):]
			if i := strings.IndexByte(line, '\n'); i >= 0 {
				line = line[:i]
			}
			mechanism = "process limit: a fork failed (" + strings.TrimPrefix(line, "fork-failed: ") + ")"
		case strings.Contains(res.Stdout, "bomb-exit:137"):
			mechanism = "memory limit inside the sandbox: the bomb was killed with SIGKILL"
		default:
			t.Fatalf("the bomb reached no limit in 150 s (no failed fork, no kill): %v", res)
		}
		if !strings.Contains(res.Stdout, "bomb-exit:") || !strings.Contains(res.Stdout, "swept") {
			t.Errorf("the command's shell did not report the bomb's end and the sweep: %v", res)
		}
	case r.Status == http.StatusConflict && r.ErrCode() == "SANDBOX_NOT_RUNNING":
		mechanism = "the whole sandbox was stopped: " + r.String()
	default:
		t.Fatalf("bomb: unexpected answer %v", r)
	}
	t.Logf("limit that fired: %s", mechanism)
	outcome := afterAbuse(t, c, victim)
	t.Logf("victim after the bomb: %s", outcome)
	if r.Status != http.StatusOK && !strings.HasPrefix(outcome, "terminated: ") {
		t.Errorf("the bomb's request failed, yet the victim is not terminated: %s", outcome)
	}
	checkBystander(t, c, bystander, marker)
}

// TestMemoryHogContained: a program allocating past the template's memory
// (base: 1 GiB) is stopped at that memory, not below it and not above it;
// the backend and another sandbox keep answering meanwhile. Accepted ways
// the limit fires: the program is stopped for memory (apitest.MemoryStop)
// after it held at least hogFloorMiB and before it passed the template's
// memory; or the whole sandbox is stopped and ends terminated with a reason.
func TestMemoryHogContained(t *testing.T) {
	t.Parallel()
	c := backend(t)
	victim, bystander, marker := setupPair(t, c, map[string]any{"template": "base", "image": "rarecloud/sandbox-python:latest"})
	limitMiB := templateMemoryMiB(t, c, "base")

	// 64 MiB chunks, each written (bytes * n fills every page), up to 3 GiB;
	// it prints what it holds after each one, and holds 896 MiB, close to
	// the limit, for 3 s on the way, so that the probes run while the
	// sandbox is under memory pressure.
	hog := `
import time
chunks = []
for i in range(48):
    chunks.append(b"\x01" * (64 << 20))
    print((i + 1) * 64, flush=True)
    if i == 13:
        time.sleep(3)
print("allocated-all", flush=True)
`
	r := abuse(t, c, victim, bystander, marker, "/run_code", map[string]any{"language": "python", "code": hog, "timeoutMs": 90000})
	switch {
	case r.Status == http.StatusOK:
		res := apitest.DecodeData[apitest.ExecResult](t, r)
		if strings.Contains(res.Stdout, "allocated-all") || res.ExitCode == nil || *res.ExitCode == 0 {
			t.Fatalf("the hog got 3 GiB in a %d MiB sandbox: %v", limitMiB, res)
		}
		held := lastFigure(res.Stdout)
		mechanism, ok := apitest.MemoryStop(res)
		if !ok {
			t.Fatalf("the hog stopped for another reason than memory: %v", res)
		}
		// Held at most the limit, and at least what the limit leaves after
		// the interpreter and one chunk of slack: the limit is the template's.
		if held > limitMiB || held < hogFloorMiB(limitMiB) {
			t.Fatalf("the hog held %d MiB when it stopped; the template's memory is %d MiB (want %d..%d): %v",
				held, limitMiB, hogFloorMiB(limitMiB), limitMiB, res)
		}
		t.Logf("the hog was stopped at the template's memory: %s after holding %d MiB (limit %d MiB)", mechanism, held, limitMiB)
	case r.Status == http.StatusConflict && r.ErrCode() == "SANDBOX_NOT_RUNNING":
		t.Logf("hog's sandbox was stopped as a whole: %v", r)
	default:
		t.Fatalf("hog: unexpected answer %v", r)
	}
	outcome := afterAbuse(t, c, victim)
	t.Logf("victim after the hog: %s", outcome)
	if r.Status != http.StatusOK && !strings.HasPrefix(outcome, "terminated: ") {
		t.Errorf("the hog's request failed, yet the victim is not terminated: %s", outcome)
	}
	checkBystander(t, c, bystander, marker)
}

// hogFloorMiB is the least a 64 MiB-step hog holds before a limit of
// limit MiB stops it: the interpreter, the agent and the shell take some,
// and the chunk that failed takes 64.
func hogFloorMiB(limit int) int { return limit - 256 }

// lastFigure is the last number the hog printed (0 when none).
func lastFigure(stdout string) int {
	n := 0
	for _, f := range strings.Fields(stdout) {
		if v, err := strconv.Atoi(f); err == nil {
			n = v
		}
	}
	return n
}

// templateMemoryMiB asks the backend for a template's memory.
func templateMemoryMiB(t *testing.T, c *apiClient, name string) int {
	t.Helper()
	r := c.Do("GET", "/sandboxes/templates", tokA, nil, nil)
	for _, tpl := range apitest.DecodeData[[]sandbox.Template](t, r) {
		if tpl.Name == name {
			return int(tpl.MemoryMB)
		}
	}
	t.Fatalf("no template %q in %v", name, r)
	return 0
}
