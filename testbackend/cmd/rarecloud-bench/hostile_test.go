package main

import (
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
	loaded := runOf("loaded", append(ms(98), 150, 300)...)
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
