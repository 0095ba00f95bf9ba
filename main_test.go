package main

import (
	"runtime/debug"
	"testing"
)

func TestResolveVersion(t *testing.T) {
	withModule := func(v string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/RareCloudio/terraform-provider-rarecloud", Version: v}}
	}
	for _, tc := range []struct {
		name   string
		linked string
		info   *debug.BuildInfo
		ok     bool
		want   string
	}{
		{"release build", "0.4.0", withModule("(devel)"), true, "0.4.0"},
		{"release build wins over the module version", "0.4.0", withModule("v0.3.9"), true, "0.4.0"},
		{"go install at a tag", "dev", withModule("v0.4.0"), true, "0.4.0"},
		{"local build", "dev", withModule("(devel)"), true, "dev"},
		{"no build info", "dev", nil, false, "dev"},
		{"empty linked value", "", withModule(""), true, "dev"},
	} {
		if got := resolveVersion(tc.linked, tc.info, tc.ok); got != tc.want {
			t.Errorf("%s: resolveVersion(%q) = %q, want %q", tc.name, tc.linked, got, tc.want)
		}
	}
}
