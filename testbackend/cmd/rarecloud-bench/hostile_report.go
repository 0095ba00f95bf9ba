package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/hostcpu"
)

// What the hostile-neighbour phase found: the well-behaved account's runs,
// the CPU they saw, the hostile answers, and the verdict.

// hostileReport is the phase's outcome.
type hostileReport struct {
	Ops          int            `json:"ops"`
	Quiet        *row           `json:"quiet"`
	Loaded       *row           `json:"loaded"`
	After        *row           `json:"after"`
	QuietP99     float64        `json:"quietP99Ms"`
	LoadedP99    float64        `json:"loadedP99Ms"`
	AfterP99     float64        `json:"afterP99Ms"`
	RatioP50     float64        `json:"ratioP50"`
	RatioP99     float64        `json:"ratioP99"`
	Limit        float64        `json:"limitP99"`
	Attacks      []*attackStats `json:"attacks"`
	Failures     []string       `json:"failures"`
	FailureCount int            `json:"failureCount"`
	Setup        []string       `json:"setup"`
	// CPU says, per run (quiet, beside the attacks, after), how busy the
	// host was and how much of that the bench process and the backend
	// took.
	CPU [3]string `json:"cpu"`
	// Rounds are the quiet and loaded runs round by round; Quiet and
	// Loaded pool them.
	Rounds []hostileRound `json:"rounds"`
}

// hostileRound is one round: a quiet run, then one beside the attacks.
type hostileRound struct {
	QuietP99  float64 `json:"quietP99Ms"`
	LoadedP99 float64 `json:"loadedP99Ms"`
	RatioP99  float64 `json:"ratioP99"`
}

// round records a round's two runs.
func (h *hostileReport) round(quiet, loaded *row) {
	q, l := p99(quiet), p99(loaded)
	h.Rounds = append(h.Rounds, hostileRound{QuietP99: q, LoadedP99: l, RatioP99: ratio(l, q)})
}

// cpuWindow measures the CPU of a run: the host's busy time, what of it
// the sandboxes of the backend's instance used (its own cgroup parent's
// accounting, when the engine's driver gives it one), the bench process's
// (the well-behaved account's client, and the attacks' when they run
// inline), the attacks' process's when they have one, and the backend's.
type cpuWindow struct {
	t0                                         time.Time
	host, sandboxes, bench, attackers, backend time.Duration
	instance                                   string
	backendPid, attackPid                      int
}

func startCPUWindow(instance string, backendPid, attackPid int) cpuWindow {
	w := cpuWindow{t0: time.Now(), host: hostcpu.Busy(), bench: pidCPU(os.Getpid()), backend: pidCPU(backendPid), instance: instance, backendPid: backendPid, attackPid: attackPid}
	w.sandboxes, _ = docker.SandboxesCPU(instance)
	if attackPid != 0 {
		w.attackers = pidCPU(attackPid)
	}
	return w
}

// stop is what the window's processes used since it started.
func (w cpuWindow) stop() cpuUse {
	u := cpuUse{wall: time.Since(w.t0), busy: hostcpu.Busy() - w.host, bench: pidCPU(os.Getpid()) - w.bench, backend: pidCPU(w.backendPid) - w.backend}
	if now, err := docker.SandboxesCPU(w.instance); err == nil && w.sandboxes > 0 {
		u.sandboxes, u.split = now-w.sandboxes, true
	}
	if w.attackPid != 0 {
		u.attackers, u.attacked = pidCPU(w.attackPid)-w.attackers, true
	}
	return u
}

// cpuUse is the CPU of one or more windows: wall time, the host's busy
// time, and of it the sandboxes' (when split), the bench's, the attack
// clients' (when attacked) and the backend's.
type cpuUse struct {
	wall, busy, sandboxes, bench, attackers, backend time.Duration
	split, attacked                                  bool
}

// add is u and v together: the rounds of one condition.
func (u cpuUse) add(v cpuUse) cpuUse {
	if u.wall == 0 {
		return v
	}
	return cpuUse{wall: u.wall + v.wall, busy: u.busy + v.busy, sandboxes: u.sandboxes + v.sandboxes, bench: u.bench + v.bench,
		attackers: u.attackers + v.attackers, backend: u.backend + v.backend, split: u.split && v.split, attacked: u.attacked || v.attacked}
}

func (u cpuUse) String() string {
	share := func(d time.Duration) float64 {
		if u.wall <= 0 {
			return 0
		}
		return 100 * d.Seconds() / (u.wall.Seconds() * float64(runtime.NumCPU()))
	}
	split := ""
	if u.split {
		split = fmt.Sprintf(" (sandboxes %.0f%%, outside them %.0f%%)", share(u.sandboxes), share(max(u.busy-u.sandboxes, 0)))
	}
	attackers := ""
	if u.attacked {
		attackers = fmt.Sprintf(", attack clients %.0f%%", share(u.attackers))
	}
	return fmt.Sprintf("%.0f%%%s; bench %.0f%%%s, backend %.0f%%", share(u.busy), split, share(u.bench), attackers, share(u.backend))
}

// pidCPU is a process's CPU time so far (user and system), 0 when it
// cannot be read.
func pidCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	k, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// verdict fills in the ratios of the loaded run to the quiet one.
func (h *hostileReport) verdict() {
	h.QuietP99, h.LoadedP99, h.AfterP99 = p99(h.Quiet), p99(h.Loaded), p99(h.After)
	if h.Quiet.P50 > 0 && h.QuietP99 > 0 {
		h.RatioP50, h.RatioP99 = h.Loaded.P50/h.Quiet.P50, h.LoadedP99/h.QuietP99
	}
}

// held says whether the well-behaved account's p99 stayed within the limit.
func (h *hostileReport) held() bool { return h.RatioP99 > 0 && h.RatioP99 <= h.Limit }

func p99(r *row) float64 {
	if r == nil || len(r.Samples) == 0 {
		return 0
	}
	return pct(r.Samples, 0.99)
}

// problems are the phase's failures, for the soak's exit.
func (h *hostileReport) problems() []string {
	var out []string
	for _, r := range []*row{h.Quiet, h.Loaded, h.After} {
		if r != nil && r.Errors > 0 {
			out = append(out, fmt.Sprintf("hostile neighbour: %d errors in %q", r.Errors, r.Name))
		}
	}
	if h.FailureCount > 0 {
		out = append(out, fmt.Sprintf("hostile neighbour: %d of the hostile account's answers were not what their attack allows (see the report)", h.FailureCount))
	}
	if !h.held() {
		out = append(out, fmt.Sprintf("hostile neighbour: the well-behaved account's p99 went from %.1f ms quiet to %.1f ms beside the hostile one, %.2f× (limit %.2f×, -hostile-max-p99-ratio)", h.QuietP99, h.LoadedP99, h.RatioP99, h.Limit))
	}
	return out
}

// markdown is the phase's section of soak.md.
func (h *hostileReport) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Hostile neighbour\n\n")
	for _, s := range h.Setup {
		fmt.Fprintf(&b, "- %s\n", s)
	}
	rounds := ""
	if len(h.Rounds) > 1 {
		rounds = fmt.Sprintf(" in %d rounds", len(h.Rounds))
	}
	fmt.Fprintf(&b, "\n| well-behaved account, %d × `echo`%s, one at a time | p50 ms | p99 ms | max ms | p50 / quiet | p99 / quiet | host CPU busy (of %d) (in the sandboxes, outside them); of it the bench process, the backend |\n|---|---:|---:|---:|---:|---:|---|\n", h.Ops, rounds, runtime.NumCPU())
	for _, x := range []struct {
		name string
		r    *row
		p99  float64
		cpu  string
	}{{"quiet (the hostile account idle)", h.Quiet, h.QuietP99, h.CPU[0]}, {"beside the hostile account's attacks", h.Loaded, h.LoadedP99, h.CPU[1]}, {"quiet again, after them", h.After, h.AfterP99, h.CPU[2]}} {
		if x.r == nil {
			continue
		}
		ratios := "| |"
		if h.Quiet.P50 > 0 && h.QuietP99 > 0 && x.r != h.Quiet {
			ratios = fmt.Sprintf("%.2f× | %.2f× |", x.r.P50/h.Quiet.P50, x.p99/h.QuietP99)
		}
		fmt.Fprintf(&b, "| %s (%d ok, %d errors) | %.1f | %.1f | %.1f | %s %s |\n", x.name, x.r.Count, x.r.Errors, x.r.P50, x.p99, x.r.Max, ratios, x.cpu)
	}
	verdict := "held"
	if !h.held() {
		verdict = "NOT held"
	}
	fmt.Fprintf(&b, "\np99 beside the attacks / quiet p99: %.2f× (limit %.2f×, `-hostile-max-p99-ratio`): %s\n", h.RatioP99, h.Limit, verdict)
	if len(h.Rounds) > 1 {
		parts := make([]string, len(h.Rounds))
		for i, r := range h.Rounds {
			parts[i] = fmt.Sprintf("%d: %.1f → %.1f ms (%.2f×)", i+1, r.QuietP99, r.LoadedP99, r.RatioP99)
		}
		fmt.Fprintf(&b, "\nRound by round, p99 quiet → beside the attacks (the rows above pool them): %s\n", strings.Join(parts, "; "))
	}
	fmt.Fprintf(&b, "\n| hostile account's attack | requests | answers by status | slowest ms | failures |\n|---|---:|---|---:|---:|\n")
	for _, a := range h.Attacks {
		keys := make([]string, 0, len(a.ByStatus))
		total := 0
		for k, n := range a.ByStatus {
			keys = append(keys, k)
			total += n
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s: %d", k, a.ByStatus[k])
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %.1f | %d |\n", a.Name, total, strings.Join(parts, ", "), a.Slowest, a.Failures)
	}
	fmt.Fprintf(&b, "\nfailures of the hostile account's answers: %d (each must be what its attack expects; a 429 or 503 with Retry-After; no other 5xx; none over %v)\n", h.FailureCount, hostileSlow)
	for _, f := range h.Failures {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	return b.String()
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
