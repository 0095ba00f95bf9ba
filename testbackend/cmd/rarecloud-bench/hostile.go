package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
)

// The soak's hostile-neighbour phase (issue 27): one account runs the
// attacks of issue 27 against a backend while another, well-behaved one
// runs the soak's command; the well-behaved account's latency is
// compared with its own quiet run before. Every answer the hostile
// account gets is counted by status: each must be what its attack
// expects, a 429 or 503 must say Retry-After, no other 5xx, and none may
// take longer than hostileSlow.

// hostileToken is the hostile account's token in the bench's tokens file.
const hostileToken = "rc_pat_hostile"

// hostileWarmUp is how long the attacks run before the well-behaved
// account is measured beside them.
const hostileWarmUp = 3 * time.Second

// hostileOptions are the phase's flags.
type hostileOptions struct {
	ops         int     // well-behaved commands per run
	concurrency int     // goroutines per looping attack
	rounds      int     // quiet runs each followed by one beside the attacks
	maxP99Ratio float64 // the p99 ratio past which the soak fails
	attacks     string  // -hostile-attacks: which attacks run
	clients     string  // -hostile-clients: where the attacks' clients run
}

// attackKeys name the attacks for -hostile-attacks, in the order.
var attackKeys = []string{"long", "device", "burst", "dns", "read", "jobs"}

// parseAttacks reads -hostile-attacks: a comma-separated list of
// attackKeys, or "all".
func parseAttacks(s string) (map[string]bool, error) {
	on := map[string]bool{}
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case k == "all":
			for _, a := range attackKeys {
				on[a] = true
			}
		case slices.Contains(attackKeys, k):
			on[k] = true
		default:
			return nil, fmt.Errorf("-hostile-attacks: unknown attack %q (want all or some of %s)", k, strings.Join(attackKeys, ","))
		}
	}
	return on, nil
}

// The hostile backend's capacity: the memory limits of all sandboxes may
// add up to 12 GiB (14 GiB declared, 2 GiB kept for the host, no
// overcommit), of which one account may hold half: 6 GiB, the flood's
// python sandbox, the files' base sandbox and two more base sandboxes.
// A create burst then passes the share at its third create instead of
// after the 40 sandboxes this host's real memory would allow an account,
// which on 2 cores would be a phase of its own.
const (
	hostileHostMemory = 14 << 30
	hostileBurst      = 8 // creates at once per burst
)

// The attacks' names, as the report lists them.
const (
	atkLongNumber = "long numbers: PATCH and POST of 8 MiB bodies, one number each"
	atkDevice     = "device files: GET files?path=/dev/zero, /dev/urandom"
	atkBurst      = "create bursts past the host share (8 at once, each created deleted)"
	atkDNS        = "DNS flood: an ALLOW_LIST sandbox floods its resolver from one UDP socket"
	atkLargeRead  = "large reads: GET of an 8,000,000-byte file of '<'"
	atkJobs       = "run-mode jobs printing 1 MiB each (create, wait, logs, delete)"
)

// floodName is what the flood asks for: not on its sandbox's list, so the
// backend's forwarder answers NXDOMAIN itself and nothing leaves the
// machine.
const (
	floodAllowed = "allowed.hostile.example"
	floodName    = "flood.hostile.example"
)

// hostileBody is a body of one JSON number filling the API's 8 MiB limit.
func hostileBody(field string) []byte {
	const limit = 8 << 20 // api.MaxBodyBytes
	head := `{"` + field + `":`
	return []byte(head + strings.Repeat("1", limit-len(head)-1) + "}")
}

// soakHostile runs the hostile-neighbour phase on a backend of its own
// and adds its rows and section to the report; it returns the phase's
// failures.
func soakHostile(ctx context.Context, o options, so soakOptions, bin, tokens, work string, rig *floorRig, rep *report) ([]string, error) {
	ho := so.hostile
	on, err := parseAttacks(ho.attacks)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(work, "hostile")
	b, err := startBackend(bin, tokens, data, o.pool, o.out, "--max-in-flight", strconv.Itoa(so.maxInFlight),
		"--host-share", "0.5", "--host-memory", strconv.Itoa(hostileHostMemory), "--memory-overcommit", "1")
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			b.stop()
		}
	}()
	if err := b.waitPool(ctx, o.pool); err != nil {
		return nil, err
	}
	good := &soakClient{base: b.url, token: token}
	evil := &soakClient{base: b.url, token: hostileToken}
	var evilIDs []string
	defer func() {
		for _, id := range evilIDs {
			_ = evil.delete(ctx, id)
		}
	}()

	fmt.Fprintln(os.Stderr, "soak: hostile neighbour: setting up")
	victim, err := good.createRunning(ctx, map[string]any{"template": "base", "timeoutMs": 3600000})
	defer func() {
		if victim != "" { // an error below: it goes all the same
			_ = good.delete(ctx, victim)
		}
	}()
	if err != nil {
		return nil, err
	}
	files, err := evil.createRunning(ctx, map[string]any{"template": "base", "timeoutMs": 3600000})
	if files != "" {
		evilIDs = append(evilIDs, files)
	}
	if err != nil {
		return nil, err
	}
	if out, err := evil.run(ctx, files, "head -c 8000000 /dev/zero | tr '\\0' '<' > /home/user/lt && wc -c < /home/user/lt"); err != nil || out != "8000000\n" {
		return nil, fmt.Errorf("hostile neighbour: making the 8 MB file: %q, %v", out, err)
	}
	var flooder string
	if on["dns"] {
		flooder, err = evil.createRunning(ctx, map[string]any{"template": "python", "timeoutMs": 3600000, "egressMode": "ALLOW_LIST", "egressAllowlist": []string{floodAllowed}})
		if flooder != "" {
			evilIDs = append(evilIDs, flooder)
		}
		if err != nil {
			return nil, fmt.Errorf("hostile neighbour: the flood's ALLOW_LIST sandbox: %w", err)
		}
	}
	if err := b.waitPool(ctx, o.pool); err != nil {
		return nil, err
	}

	h := &hostileReport{Ops: ho.ops, Limit: ho.maxP99Ratio}
	measure := func(name string, n, attackPid int) (*row, cpuUse) {
		fmt.Fprintf(os.Stderr, "soak: %s\n", name)
		w := startCPUWindow(instance.ID(data), b.proc.Pid(), attackPid)
		r := repeat(n, func() error { return good.command(ctx, victim, 0) }, name)
		return r, w.stop()
	}
	// Rounds: a quiet run, then one beside the attacks, ho.rounds times.
	// Each condition pools its rounds, so both are measured over the same
	// minutes and a slow spell of the machine weighs on both alike. The
	// sandboxes the attacks use stay between rounds (as in the first quiet
	// run); the flood, the bursts' and the jobs' sandboxes do not.
	plan := attackPlan{Base: b.url, Files: files, Flooder: flooder, On: on, Concurrency: ho.concurrency}
	var quiet, loaded []*row
	var cpuQuiet, cpuLoaded cpuUse
	var res attackResult
	for i, n := range splitOps(ho.ops, ho.rounds) {
		q, use := measure(fmt.Sprintf("hostile neighbour: round %d of %d: %d commands of the well-behaved account, quiet", i+1, ho.rounds, n), n, 0)
		quiet, cpuQuiet = append(quiet, q), cpuQuiet.add(use)
		var atk attackRunner
		if ho.clients == clientsInline {
			atk = startAttacks(plan)
		} else if atk, err = startAttackProcess(plan, ho.clients == clientsNiced); err != nil {
			return nil, err
		}
		time.Sleep(hostileWarmUp) // until the jobs and bursts are under way
		l, use := measure(fmt.Sprintf("hostile neighbour: round %d of %d: %d commands of the well-behaved account, beside the hostile account", i+1, ho.rounds, n), n, atk.pid())
		loaded, cpuLoaded = append(loaded, l), cpuLoaded.add(use)
		h.round(q, l)
		r, err := atk.stop()
		if err != nil {
			return nil, err
		}
		res.add(r)
		fmt.Fprintln(os.Stderr, "soak: hostile neighbour: attacks stopped")
		// The hostile account's sandboxes go, but for the attacks' own
		// until the last round: a burst's or a job's delete answered 429
		// (never retried) leaves one behind.
		keep := []string{files, flooder}
		if i == ho.rounds-1 {
			keep = nil
		}
		if ids, err := evil.list(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "soak: hostile neighbour: listing the hostile sandboxes:", err)
		} else {
			evilIDs = ids
		}
		evil.deleteAll(ctx, slices.DeleteFunc(slices.Clone(evilIDs), func(id string) bool { return slices.Contains(keep, id) }))
		evilIDs = keep
		if err := b.waitPool(ctx, o.pool); err != nil {
			return nil, err
		}
	}
	h.Quiet = pooled(fmt.Sprintf("hostile neighbour: %d commands of the well-behaved account, quiet", ho.ops), quiet...)
	h.Loaded = pooled(fmt.Sprintf("hostile neighbour: %d commands of the well-behaved account, beside the hostile account", ho.ops), loaded...)
	h.CPU[0], h.CPU[1] = cpuQuiet.String(), cpuLoaded.String()
	after, use := measure(fmt.Sprintf("hostile neighbour: %d commands of the well-behaved account, quiet again", ho.ops), ho.ops, 0)
	h.After, h.CPU[2] = after, use.String()
	if err := good.delete(ctx, victim); err != nil {
		return nil, err
	}
	victim = ""
	b.stop()
	stopped = true
	leaked := leftContainers(ctx, rig, instance.ID(data))

	for _, a := range res.Stats {
		h.Attacks = append(h.Attacks, a)
		h.FailureCount += a.Failures
	}
	h.Failures = res.Failed
	h.verdict()
	h.Setup = []string{
		fmt.Sprintf("a backend of its own (--max-in-flight %d, warm pool %d, --host-share 0.5, --host-memory %d GiB, --memory-overcommit 1: the account's share is 6 GiB, the flood's python sandbox, the files' base sandbox and two more), two accounts; the hostile one never honours Retry-After", so.maxInFlight, o.pool, hostileHostMemory>>30),
		fmt.Sprintf("the well-behaved account: %d × `echo` in one base sandbox, one at a time, in %d rounds of a quiet run then one beside the attacks (each condition's rounds pooled), then quiet again once the attacks stopped and the hostile sandboxes are deleted", ho.ops, ho.rounds),
		fmt.Sprintf("the hostile account's attacks (-hostile-attacks): %s", strings.Join(slices.DeleteFunc(slices.Clone(attackKeys), func(k string) bool { return !on[k] }), ", ")),
		fmt.Sprintf("the hostile account: each attack in %d goroutines looping as fast as their answers come (create bursts: one loop, %d at once, every 250 ms; the DNS flood: one for the whole run), in %s, on the same %d cores as the backend and the well-behaved account", ho.concurrency, hostileBurst, clientsWhere(ho.clients), runtime.NumCPU()),
	}
	rep.Hostile = h
	h.Loaded.Floor, h.Loaded.Ratio, h.Loaded.RatioP95 = h.Quiet.Name, ratio(h.Loaded.P50, h.Quiet.P50), ratio(h.Loaded.P95, h.Quiet.P95)
	h.After.Floor, h.After.Ratio, h.After.RatioP95 = h.Quiet.Name, ratio(h.After.P50, h.Quiet.P50), ratio(h.After.P95, h.Quiet.P95)
	rep.Rows = append(rep.Rows, h.Quiet, h.Loaded, h.After)
	problems := h.problems()
	if leaked != 0 {
		problems = append(problems, fmt.Sprintf("hostile neighbour: %d containers left after deleting every sandbox and stopping the backend", leaked))
	}
	rep.Notes = append(rep.Notes, fmt.Sprintf("hostile neighbour: the well-behaved account's p99 %.1f ms quiet, %.1f ms beside the attacks: %.2f× (limit %.2f×); hostile answers not allowed: %d; containers left: %d",
		h.QuietP99, h.LoadedP99, h.RatioP99, h.Limit, h.FailureCount, leaked))
	return problems, nil
}

// splitOps splits ops commands into rounds runs whose sizes differ by at
// most one.
func splitOps(ops, rounds int) []int {
	out := make([]int, rounds)
	for i := range out {
		out[i] = ops / rounds
		if i < ops%rounds {
			out[i]++
		}
	}
	return out
}

// sandboxID is the id in a create's answer.
func sandboxID(body []byte) string {
	var env struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	_ = json.Unmarshal(body, &env)
	return env.Data.ID
}
