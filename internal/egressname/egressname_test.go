package egressname

import (
	"strings"
	"testing"
)

func TestProblem(t *testing.T) {
	for name, want := range map[string]string{
		"example.com":                     "",
		"api.example.com.":                "",
		"*.cdn.example.net":               "",
		"xn--bcher-kva.example":           "",
		"198.51.100.7":                    "is an IP address",
		"[2001:db8::1]":                   "is an IP address",
		"10.0.0.0/8":                      "is an address range",
		"":                                "is empty",
		"*":                               "only wildcard form",
		"api.*.example.com":               "only wildcard form",
		"*foo.example.com":                "only wildcard form",
		"*.com":                           "whole top-level domain",
		"localhost":                       "at least two labels",
		"bad_name.example.com":            `invalid label "bad_name"`,
		"example.com:443":                 "invalid label",
		"a..example.com":                  "invalid label",
		"1.2.3.999":                       "last label is numeric",
		strings.Repeat("a.", 127) + "com": "longer than 253",
	} {
		got := Problem(name)
		if want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("Problem(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestKey(t *testing.T) {
	if Key("API.Example.COM.") != Key("api.example.com") {
		t.Fatal("keys of one name differ")
	}
}
