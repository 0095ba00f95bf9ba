package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	create := expect{201: "", 409: "HOST_SHARE_EXCEEDED"}
	for _, c := range []struct {
		name       string
		want       expect
		status     int
		code, ra   string
		took       time.Duration
		wantReason string // "" when the answer is fine
	}{
		{"expected", create, 201, "", "", time.Millisecond, ""},
		{"expected code", create, 409, "HOST_SHARE_EXCEEDED", "", time.Millisecond, ""},
		{"wrong code", create, 409, "VCPU_LIMIT_EXCEEDED", "", time.Millisecond, "want HOST_SHARE_EXCEEDED"},
		{"503 with Retry-After", create, 503, "HOST_CAPACITY_EXHAUSTED", "30", time.Millisecond, ""},
		{"503 without Retry-After", create, 503, "HOST_CAPACITY_EXHAUSTED", "", time.Millisecond, "without a Retry-After"},
		{"503 anywhere", expect{400: "FILE_NOT_REGULAR"}, 503, "SERVICE_UNAVAILABLE", "5", time.Millisecond, ""},
		{"429 anywhere", expect{400: "FILE_NOT_REGULAR"}, 429, "RATE_LIMITED", "1", time.Millisecond, ""},
		{"429 without Retry-After", expect{400: "FILE_NOT_REGULAR"}, 429, "RATE_LIMITED", "soon", time.Millisecond, "without a Retry-After"},
		{"500", create, 500, "INTERNAL_ERROR", "", time.Millisecond, "a 5xx other than 503"},
		{"502", create, 502, "COMMAND_OUTCOME_UNKNOWN", "", time.Millisecond, "a 5xx other than 503"},
		{"accepted long number", expect{422: "INVALID_TIMEOUT"}, 200, "", "", time.Millisecond, "not an answer this attack expects"},
		{"slow", expect{400: "FILE_NOT_REGULAR"}, 400, "FILE_NOT_REGULAR", "", 11 * time.Second, "more than 10s"},
		{"just in time", expect{400: "FILE_NOT_REGULAR"}, 400, "FILE_NOT_REGULAR", "", 10 * time.Second, ""},
	} {
		got := judge(c.want, c.status, c.code, c.ra, c.took)
		if (got == "") != (c.wantReason == "") || !strings.Contains(got, c.wantReason) {
			t.Errorf("%s: judge = %q, want %q", c.name, got, c.wantReason)
		}
	}
}

// runOf is a row of ms samples, as summarize makes it.
func runOf(name string, ms ...float64) *row {
	d := make([]time.Duration, len(ms))
	for i, m := range ms {
		d[i] = time.Duration(m * float64(time.Millisecond))
	}
	return summarize(name, d, 0)
}

// ms is n samples: 1..n ms, then the tail given.
func ms(n int, tail ...float64) []float64 {
	out := make([]float64, 0, n+len(tail))
	for i := 1; i <= n; i++ {
		out = append(out, float64(i))
	}
	return append(out, tail...)
}

func TestHostileVerdictAndReport(t *testing.T) {
	// 100 samples: p50 is the 51st value of the sorted list (index 50), p99
	// the 99th (index 98).
	quiet := runOf("quiet", ms(100)...)
	loaded := runOf("loaded", ms(98, 150, 300)...)
	h := &hostileReport{Ops: 100, Quiet: quiet, Loaded: loaded, After: runOf("after", ms(100)...), Limit: 1.5,
		Attacks: []*attackStats{{Name: atkBurst, ByStatus: map[string]int{"409 HOST_SHARE_EXCEEDED": 30, "201": 2, "200": 2}, Slowest: 812.5}}}
	h.CPU = [3]string{"10%; bench 1%, backend 2%", "90%; bench 30%, backend 40%", ""}
	h.verdict()
	if h.QuietP99 != 99 || h.LoadedP99 != 150 || h.RatioP99 != 150.0/99 || h.RatioP50 != 1 {
		t.Fatalf("verdict: quiet p99 %v, loaded p99 %v, ratios %v / %v", h.QuietP99, h.LoadedP99, h.RatioP50, h.RatioP99)
	}
	if h.held() || len(h.problems()) != 1 || !strings.Contains(h.problems()[0], "1.52× (limit 1.50×") {
		t.Fatalf("1.52× held against 1.5 (%v)", h.problems())
	}
	h.Limit = 1.6
	if !h.held() || len(h.problems()) != 0 {
		t.Fatalf("1.52× not held against 1.6: %v", h.problems())
	}
	h.FailureCount, h.Failures = 1, []string{"x: HTTP 500 INTERNAL_ERROR"}
	h.Loaded.Errors = 2
	if p := h.problems(); len(p) != 2 {
		t.Fatalf("problems with a failed answer and two errors: %v", p)
	}
	md := h.markdown()
	for _, want := range []string{
		"| beside the hostile account's attacks (100 ok, 2 errors) | 51.0 | 150.0 | 300.0 | 1.00× | 1.52× | 90%; bench 30%, backend 40% |",
		"| quiet (the hostile account idle) (100 ok, 0 errors) | 51.0 | 99.0 | 100.0 | | | 10%; bench 1%, backend 2% |",
		"p99 beside the attacks / quiet p99: 1.52× (limit 1.60×, `-hostile-max-p99-ratio`): held",
		"| " + atkBurst + " | 34 | 200: 2, 201: 2, 409 HOST_SHARE_EXCEEDED: 30 | 812.5 | 0 |",
		"failures of the hostile account's answers: 1",
		"- x: HTTP 500 INTERNAL_ERROR",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// A quiet run with no samples (every command failed) is never held.
func TestHostileVerdictWithoutSamples(t *testing.T) {
	h := &hostileReport{Quiet: summarize("quiet", nil, 5), Loaded: runOf("loaded", 1, 2), Limit: 1.5}
	h.verdict()
	if h.held() {
		t.Fatal("held without a quiet sample")
	}
}

func TestParseAttacks(t *testing.T) {
	all, err := parseAttacks("all")
	if err != nil || len(all) != len(attackKeys) {
		t.Fatalf("all: %v, %v", all, err)
	}
	two, err := parseAttacks("dns, jobs")
	if err != nil || len(two) != 2 || !two["dns"] || !two["jobs"] {
		t.Fatalf("dns, jobs: %v, %v", two, err)
	}
	if _, err := parseAttacks("dns,fork"); err == nil || !strings.Contains(err.Error(), `"fork"`) {
		t.Fatalf("an unknown attack: %v", err)
	}
}

func TestSplitOps(t *testing.T) {
	for _, c := range []struct {
		ops, rounds int
		want        []int
	}{
		{1000, 4, []int{250, 250, 250, 250}},
		{10, 3, []int{4, 3, 3}},
		{400, 1, []int{400}},
		{3, 3, []int{1, 1, 1}},
	} {
		got := splitOps(c.ops, c.rounds)
		sum := 0
		for _, n := range got {
			sum += n
		}
		if !slices.Equal(got, c.want) || sum != c.ops {
			t.Errorf("splitOps(%d, %d) = %v, want %v", c.ops, c.rounds, got, c.want)
		}
	}
}

// The rounds of a condition pool into one row: its p99 is that of all
// the samples, not of any round, and a slow round weighs as its share.
func TestRoundsPool(t *testing.T) {
	q1, q2 := runOf("q1", ms(100)...), runOf("q2", ms(100)...)
	l1, l2 := runOf("l1", ms(98, 150, 300)...), runOf("l2", ms(100)...)
	l2.Errors = 1
	h := &hostileReport{Ops: 200, Limit: 1.5}
	h.round(q1, l1)
	h.round(q2, l2)
	h.Quiet, h.Loaded, h.After = pooled("quiet", q1, q2), pooled("loaded", l1, l2), runOf("after", ms(100)...)
	h.verdict()
	if h.Quiet.Count != 200 || h.Loaded.Count != 200 || h.Loaded.Errors != 1 {
		t.Fatalf("pooled counts: quiet %d, loaded %d with %d errors", h.Quiet.Count, h.Loaded.Count, h.Loaded.Errors)
	}
	// 200 samples: p99 is index 197 of the sorted list. Quiet: 99 (the
	// two rounds' 1..100, twice each). Loaded: 1..98 twice, 99, 100,
	// 150, 300: index 197 is 100.
	if h.QuietP99 != 99 || h.LoadedP99 != 100 {
		t.Fatalf("pooled p99s: quiet %v, loaded %v", h.QuietP99, h.LoadedP99)
	}
	if len(h.Rounds) != 2 || h.Rounds[0].LoadedP99 != 150 || h.Rounds[0].RatioP99 != 150.0/99 || h.Rounds[1].RatioP99 != 1 {
		t.Fatalf("rounds: %+v", h.Rounds)
	}
	if md := h.markdown(); !strings.Contains(md, "Round by round, p99 quiet → beside the attacks (the rows above pool them): 1: 99.0 → 150.0 ms (1.52×); 2: 99.0 → 99.0 ms (1.00×)") ||
		!strings.Contains(md, "| well-behaved account, 200 × `echo` in 2 rounds, one at a time |") {
		t.Errorf("markdown:\n%s", md)
	}
	one := &hostileReport{Ops: 100, Quiet: q1, Loaded: l1, After: q2, Limit: 1.5}
	one.round(q1, l1)
	if strings.Contains(one.markdown(), "Round by round") {
		t.Error("one round listed round by round")
	}
}

// A round's answers add to the others' under each attack's name.
func TestAttackResultsAdd(t *testing.T) {
	var r attackResult
	r.add(attackResult{Stats: []*attackStats{{Name: atkBurst, ByStatus: map[string]int{"201": 2}, Slowest: 30}}})
	r.add(attackResult{Stats: []*attackStats{
		{Name: atkDNS, ByStatus: map[string]int{"200": 1}, Slowest: 5},
		{Name: atkBurst, ByStatus: map[string]int{"201": 1, "409 HOST_SHARE_EXCEEDED": 4}, Slowest: 10, Failures: 1},
	}, Failed: []string{"x"}})
	if len(r.Stats) != 2 || r.Stats[0].Name != atkBurst || r.Stats[1].Name != atkDNS {
		t.Fatalf("stats: %+v", r.Stats)
	}
	b := r.Stats[0]
	if b.ByStatus["201"] != 3 || b.ByStatus["409 HOST_SHARE_EXCEEDED"] != 4 || b.Slowest != 30 || b.Failures != 1 || len(r.Failed) != 1 {
		t.Fatalf("burst: %+v, failed %v", b, r.Failed)
	}
}

// The CPU of a condition's rounds adds up over their wall time.
func TestCPUUseAdds(t *testing.T) {
	var u cpuUse
	u = u.add(cpuUse{wall: time.Second, busy: 1500 * time.Millisecond, sandboxes: time.Second, split: true})
	u = u.add(cpuUse{wall: time.Second, busy: 500 * time.Millisecond, sandboxes: 0, split: true, attacked: true, attackers: 200 * time.Millisecond})
	cpus := float64(runtime.NumCPU())
	want := fmt.Sprintf("%.0f%% (sandboxes %.0f%%, outside them %.0f%%); bench 0%%, attack clients %.0f%%, backend 0%%", 100*2/(2*cpus), 100*1/(2*cpus), 100*1/(2*cpus), 100*0.2/(2*cpus))
	if got := u.String(); got != want {
		t.Fatalf("cpuUse = %q, want %q", got, want)
	}
}
