package docker

// Where an image may be pulled from. A registry a customer names is an
// address the host connects to, outside every rule that holds sandboxes.
// By default the backend pulls only from registries whose every address
// is a public one; an operator allows named registries (exact
// host[:port], as the image reference spells it) with --allow-registry.
// IMAGES.md says the same for users.
//
// A name is resolved by the backend (net.DefaultResolver, bounded by
// LookupTimeout) and refused when any address it resolves to is blocked.
// The engine never connects to a registry: the backend downloads the
// image itself (docker_images.go) and every connection of that download,
// to the registry and to each host a redirect names, goes through
// pullDialer, which resolves the name again, refuses it when any address
// is blocked, and dials only the addresses it checked (the dialer's
// Control checks each once more on the socket). A name that rebinds
// between the check and the connection therefore still meets the policy,
// and so does a redirect. An allowed registry is exempt for its own
// host:port only: a redirect from it to anywhere else is checked like any
// other host, unless that host:port is allowed too.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
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
	addrs, err := p.resolve(ctx, host)
	if err != nil {
		return &container.ImageRefusedError{Image: ref, Rule: container.RulePull, Msg: fmt.Sprintf(
			"image %q could not be pulled: its registry %s does not resolve from the backend; check the name, or use an image from a public registry", ref, domain)}
	}
	for _, a := range addrs {
		if why := blockedAddr(a); why != "" {
			return registryRefused(ref, domain, why)
		}
	}
	return nil
}

// resolve is host's addresses: host itself when it is one, else what the
// policy's resolver answers within lookupTimeout (none is an error). The
// policy's check and the download's dialer both judge what it returns.
func (p *registryPolicy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	lctx, cancel := context.WithTimeout(ctx, p.lookupTimeout)
	defer cancel()
	addrs, err := p.resolver.LookupNetIP(lctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

func registryRefused(ref, domain, why string) *container.ImageRefusedError {
	return &container.ImageRefusedError{Image: ref, Rule: container.RuleRegistry, Msg: fmt.Sprintf(
		"use an image from a public registry: image %q names registry %s, which resolves to %s address, and the backend pulls only from public addresses (an operator can allow a registry with --allow-registry)", ref, domain, why)}
}

// downloadRefused answers a download whose connection the policy refused
// after the check passed: a name that now resolves to a blocked address,
// or a redirect to one. Where the redirect pointed is not said: the
// registry chose it.
func downloadRefused(ref, why string) *container.ImageRefusedError {
	domain, _, _ := registryOf(ref)
	return &container.ImageRefusedError{Image: ref, Rule: container.RuleRegistry, Msg: fmt.Sprintf(
		"use an image from a public registry: downloading image %q from registry %s needed a connection to %s address (the registry's own, or one it redirected the download to), which the backend refused: it pulls only from public addresses (an operator can allow a registry with --allow-registry)", ref, domain, why)}
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

// errBlockedDial is what a dial to a blocked address answers.
var errBlockedDial = errors.New("address refused by the registry policy")

// blockedDialError is a dial the policy refused, with why (blockedAddr's
// words; never the name or address, which the registry may choose).
type blockedDialError struct{ why string }

func (e *blockedDialError) Error() string   { return errBlockedDial.Error() + ": " + e.why + " address" }
func (e *blockedDialError) Is(t error) bool { return t == errBlockedDial }

// dialTimeout bounds one connection of a download.
const dialTimeout = 10 * time.Second

// pullDialer is the only way a download reaches the network. It records
// the first connection the policy refused, whatever error the HTTP and
// registry layers above make of it.
type pullDialer struct {
	policy  *registryPolicy
	mu      sync.Mutex
	refused *blockedDialError
}

// DialContext dials addr (host:port, as http.Transport asks: the
// registry's, or a redirect target's). An allowed registry's own
// host:port is dialed as asked. Any other is resolved (policy.resolver),
// refused when any address it resolves to is blocked, and dialed to the
// checked addresses only, each checked again at connect time.
func (pd *pullDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	p := pd.policy
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if p.allowedAddr(host, port) {
		d := &net.Dialer{Timeout: dialTimeout, Resolver: p.resolver}
		return d.DialContext(ctx, network, addr)
	}
	pn, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, err
	}
	addrs, err := p.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if why := blockedAddr(a); why != "" {
			return nil, pd.refuse(why)
		}
	}
	d := checkingDialer()
	var first error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), uint16(pn)).String())
		if err == nil {
			return c, nil
		}
		var bd *blockedDialError
		if errors.As(err, &bd) {
			return nil, pd.refuse(bd.why)
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

func (pd *pullDialer) refuse(why string) error {
	e := &blockedDialError{why: why}
	pd.mu.Lock()
	if pd.refused == nil {
		pd.refused = e
	}
	pd.mu.Unlock()
	return e
}

// refusal is the first connection the policy refused, or nil.
func (pd *pullDialer) refusal() *blockedDialError {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	return pd.refused
}

// allowedAddr reports whether host:port (as a dial names it) is an
// allowed registry's own. An allowed registry named without a port is
// reached on 443 (HTTPS) or 80 (its plain HTTP fallback).
func (p *registryPolicy) allowedAddr(host, port string) bool {
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	for a := range p.allow {
		ah, ap, err := net.SplitHostPort(a)
		if err != nil {
			ah, ap = a, ""
		}
		ah = strings.TrimSuffix(strings.TrimPrefix(ah, "["), "]")
		hosts := []string{ah}
		if ah == "docker.io" || ah == "index.docker.io" {
			hosts = []string{"index.docker.io", dockerHubRegistry}
		}
		for _, h := range hosts {
			if h == host && (ap == port || ap == "" && (port == "443" || port == "80")) {
				return true
			}
		}
	}
	return false
}

// checkingDialer dials only addresses blockedAddr lets through, checked
// at connect time on the address actually dialed.
func checkingDialer() *net.Dialer {
	return &net.Dialer{
		Timeout: dialTimeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return err
			}
			if why := blockedAddr(ip); why != "" {
				return &blockedDialError{why: why}
			}
			return nil
		},
	}
}
