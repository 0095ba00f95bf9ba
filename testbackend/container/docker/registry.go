package docker

// Where an image may be pulled from. The engine pulls from the host's
// network namespace, outside every rule that holds sandboxes, so a
// registry a customer names is an address the host connects to. By
// default the backend pulls only from registries whose every address is a
// public one; an operator allows named registries (exact host[:port], as
// the image reference spells it) with --allow-registry. IMAGES.md says the
// same for users.
//
// A name is resolved by the backend (net.DefaultResolver, bounded by
// LookupTimeout) and refused when any address it resolves to is blocked.
// The engine resolves again when it pulls: a name that rebinds between the
// two can still reach a blocked address (the residual risk IMAGES.md
// names). The backend narrows that window: its own manifest fetch, made
// just before the engine's pull, dials through registryDialer, which
// refuses blocked addresses at connect time, and the engine then pulls the
// digest that fetch saw.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/distribution/reference"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// DefaultLookupTimeout bounds the resolution of a registry's name.
const DefaultLookupTimeout = 5 * time.Second

// dockerHubRegistry is the host behind the docker.io of short names.
const dockerHubRegistry = "registry-1.docker.io"

// registryPolicy decides which registries the backend pulls from.
type registryPolicy struct {
	allow         map[string]bool // host[:port], lower case, as references spell them
	lookupTimeout time.Duration
	resolver      *net.Resolver
}

func newRegistryPolicy(allow []string, lookupTimeout time.Duration) (*registryPolicy, error) {
	p := &registryPolicy{allow: map[string]bool{}, lookupTimeout: lookupTimeout, resolver: net.DefaultResolver}
	if p.lookupTimeout <= 0 {
		p.lookupTimeout = DefaultLookupTimeout
	}
	for _, a := range allow {
		a = strings.ToLower(strings.TrimSpace(a))
		if a == "" {
			continue
		}
		if strings.Contains(a, "/") {
			return nil, fmt.Errorf("runtime: allowed registry %q is not host[:port]", a)
		}
		p.allow[a] = true
	}
	return p, nil
}

// registryOf is the registry part of ref as a reference spells it
// ("docker.io" for short names) and the host to connect to.
func registryOf(ref string) (domain, host string, err error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", err
	}
	domain = strings.ToLower(reference.Domain(named))
	host = domain
	if h, _, err := net.SplitHostPort(domain); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if domain == "docker.io" || domain == "index.docker.io" {
		host = dockerHubRegistry
	}
	return domain, host, nil
}

// allowed reports whether the operator allowed ref's registry.
func (p *registryPolicy) allowed(domain string) bool { return p.allow[domain] }

// check refuses ref when its registry is not allowed and any address it
// resolves to is blocked. The refusal names the image and the rule only.
func (p *registryPolicy) check(ctx context.Context, ref string) error {
	domain, host, err := registryOf(ref)
	if err != nil {
		return &container.ImageRefusedError{Image: ref, Rule: container.RulePull, Msg: fmt.Sprintf("image %q could not be pulled: it is not a valid image reference", ref)}
	}
	if p.allowed(domain) {
		return nil
	}
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		lctx, cancel := context.WithTimeout(ctx, p.lookupTimeout)
		addrs, err = p.resolver.LookupNetIP(lctx, "ip", host)
		cancel()
		if err != nil || len(addrs) == 0 {
			return &container.ImageRefusedError{Image: ref, Rule: container.RulePull, Msg: fmt.Sprintf(
				"image %q could not be pulled: its registry %s does not resolve from the backend; check the name, or use an image from a public registry", ref, domain)}
		}
	}
	for _, a := range addrs {
		if why := blockedAddr(a); why != "" {
			return registryRefused(ref, domain, why)
		}
	}
	return nil
}

func registryRefused(ref, domain, why string) *container.ImageRefusedError {
	return &container.ImageRefusedError{Image: ref, Rule: container.RuleRegistry, Msg: fmt.Sprintf(
		"use an image from a public registry: image %q names registry %s, which resolves to %s address, and the backend pulls only from public addresses (an operator can allow a registry with --allow-registry)", ref, domain, why)}
}

// Ranges that are neither loopback, private, link-local, multicast nor
// unspecified (netip answers those) but still no public registry's.
var blockedPrefixes = []struct {
	p   netip.Prefix
	why string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a reserved"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (100.64.0.0/10)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a reserved"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a reserved"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a reserved"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a reserved"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a reserved"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a reserved"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a reserved"}, // NAT64 embeds any IPv4 address
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a reserved"},
	{netip.MustParsePrefix("100::/64"), "a reserved"},
	{netip.MustParsePrefix("2001::/23"), "a reserved"}, // Teredo and other IETF assignments
	{netip.MustParsePrefix("2001:db8::/32"), "a reserved"},
	{netip.MustParsePrefix("2002::/16"), "a reserved"}, // 6to4 embeds any IPv4 address
	{netip.MustParsePrefix("fec0::/10"), "a reserved"},
}

// blockedAddr says why the backend will not connect to a, or "".
func blockedAddr(a netip.Addr) string {
	a = a.Unmap()
	switch {
	case !a.IsValid() || a.IsUnspecified():
		return "an unspecified"
	case a.IsLoopback():
		return "a loopback"
	case a.IsPrivate():
		return "a private"
	case a.IsLinkLocalUnicast():
		return "a link-local"
	case a.IsMulticast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast():
		return "a multicast"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "a broadcast"
	}
	for _, b := range blockedPrefixes {
		if b.p.Contains(a) {
			return b.why
		}
	}
	if ownAddr(a) {
		return "one of the backend's own"
	}
	return ""
}

// ownAddr reports an address of one of this host's interfaces.
func ownAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// errBlockedDial is what registryDialer answers for a blocked address.
var errBlockedDial = errors.New("address refused by the registry policy")

// registryDialer dials only addresses blockedAddr lets through, checked at
// connect time on the address actually dialed: a name that rebinds after
// the check, or a redirect to another host, cannot reach a blocked one.
func registryDialer() *net.Dialer {
	return &net.Dialer{
		Timeout: 10 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return err
			}
			if blockedAddr(ip) != "" {
				return errBlockedDial
			}
			return nil
		},
	}
}
