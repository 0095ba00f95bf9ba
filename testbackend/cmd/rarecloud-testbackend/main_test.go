package main

import (
	"slices"
	"strings"
	"testing"
)

// --allow-registry is repeatable and comma-separated, lower-cased; a URL
// or a path is refused.
func TestAllowRegistryFlag(t *testing.T) {
	var got []string
	l := registryList{&got}
	for _, v := range []string{"127.0.0.1:5000", " Registry.Example:443 , localhost:5001,", "[::1]:5002"} {
		if err := l.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	if want := []string{"127.0.0.1:5000", "registry.example:443", "localhost:5001", "[::1]:5002"}; !slices.Equal(got, want) {
		t.Fatalf("registries %v, want %v", got, want)
	}
	for _, bad := range []string{"http://127.0.0.1:5000", "127.0.0.1:5000/team"} {
		if err := l.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted", bad)
		}
	}
}

// A --start-duty outside (0, 1] is refused before anything starts, not
// replaced by the default behind the operator's back.
func TestStartDutyFlagRefusedOutsideItsRange(t *testing.T) {
	for _, v := range []string{"0", "-0.5", "1.01", "NaN"} {
		err := run([]string{"--start-duty", v, "--log-level", "none-such"})
		if err == nil || !strings.Contains(err.Error(), "start-duty") {
			t.Errorf("--start-duty %s: %v, want it refused", v, err)
		}
	}
}

// A --transfer-rate below the least is refused before anything starts,
// not raised to it behind the operator's back. (The bad --log-level,
// checked later, keeps a run without the check from starting a backend.)
func TestTransferRateFlagRefusedBelowTheLeast(t *testing.T) {
	for _, v := range []string{"0", "-1", "2097151"} {
		err := run([]string{"--transfer-rate", v, "--log-level", "none-such"})
		if err == nil || !strings.Contains(err.Error(), "transfer-rate") {
			t.Errorf("--transfer-rate %s: %v, want it refused", v, err)
		}
	}
}
