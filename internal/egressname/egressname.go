// Package egressname is the one definition of the rules for the host names
// of an egress allowlist (egressMode ALLOW_LIST, an extension of API v1):
// the provider checks them at plan time and the test backend on create,
// with the same words.
package egressname

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// MaxAllowlist is the documented maximum number of allowlist entries.
const MaxAllowlist = 64

// label is one label of a host name: letters, digits and inner hyphens.
var label = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// Problem says what is wrong with one allowlist entry, "" when nothing
// is: an entry is a host name of two or more labels, or "*." followed by
// one (any name below it). Addresses and ranges are refused: the addresses
// an allowed name resolves to are allowed with it.
func Problem(name string) string {
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return "is an IP address: list host names (the addresses an allowed name resolves to are allowed with it)"
	}
	if _, err := netip.ParsePrefix(name); err == nil {
		return "is an address range: list host names"
	}
	host := strings.TrimSuffix(name, ".")
	wildcard := strings.HasPrefix(host, "*.")
	if wildcard {
		host = host[2:]
	}
	switch {
	case host == "":
		return "is empty"
	case len(host) > 253:
		return "is longer than 253 characters"
	case strings.Contains(host, "*"):
		return `has a "*" that is not the whole first label ("*.example.com" is the only wildcard form)`
	}
	labels := strings.Split(host, ".")
	if len(labels) < 2 {
		if wildcard {
			return `would allow a whole top-level domain: a wildcard needs at least two labels after "*."`
		}
		return "is not a fully qualified host name: it needs at least two labels, like example.com"
	}
	for _, l := range labels {
		if !label.MatchString(l) {
			return fmt.Sprintf("has an invalid label %q: labels are 1 to 63 letters, digits and inner hyphens", l)
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		return "is not a host name: its last label is numeric"
	}
	return ""
}

// Key is how allowlist entries compare: case-insensitive, without a
// trailing dot.
func Key(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }
