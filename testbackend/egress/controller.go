// Package egress enforces the egress modes of sandboxes (DENY_ALL,
// ALLOW_LIST) in the kernel, per sandbox, on the sandbox network: an
// nftables table of the backend's own (nft.go) and a DNS forwarder that
// knows each asking sandbox by its address (dns.go). The sandbox package
// decides who gets which policy; this package only puts it into effect.
package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// Modes, as the API names them.
const (
	ModeDenyAll   = sandbox.EgressDenyAll
	ModeAllowList = sandbox.EgressAllowList
)

// Bounds of how long a resolved address stays reachable: at least MinTTL
// (a zero TTL must still let the connect that follows the answer through),
// at most MaxTTL (answers are also rewritten to that TTL, so the sandbox
// never caches an address longer than the rules allow it).
const (
	MinTTL = 5 * time.Second
	MaxTTL = time.Hour
)

// TablePrefix starts the name of every backend's nftables table; the rest
// is the instance id (package instance), so a reaper can tell whose it is.
const TablePrefix = "rarecloud_egress_"

// Config describes the network and where allowed names are resolved.
type Config struct {
	// Table is the nftables table (family inet) of this backend alone.
	Table string
	// Bridge is the sandbox network's interface, Gateway its address on
	// the host (the DNS forwarder listens there), Subnet its range.
	Bridge  string
	Gateway netip.Addr
	Subnet  netip.Prefix
	// Blocked ranges are never answered (the firewall of make setup also
	// refuses them); the built-in private and reserved ranges always are.
	Blocked []netip.Prefix
	// Upstream is the resolver (host:port) that allowed names go to: the
	// sandboxes' forwarder of make setup, which forwards to the host's.
	Upstream string
	// Used lists the addresses taken on the sandbox network (every
	// container's, other backends' too).
	Used func(ctx context.Context) ([]netip.Addr, error)
	// EngineRange is the part of Subnet the engine's allocator hands out
	// (network.json's ipam_range): ReserveIP picks outside it, from the
	// same addresses the backend leases to other sandboxes, so that
	// restricted sandboxes have no smaller pool of their own. Unset: the
	// upper half of Subnet.
	EngineRange netip.Prefix
	Logger      *slog.Logger
	// Limits bound what one sandbox's DNS may cost (limit.go); zero
	// fields take DefaultLimits.
	Limits Limits
}

// Controller is one backend's egress enforcement. Its rules outlive it (a
// backend restart leaves sandboxes restricted); Sync at the next start
// replaces them.
type Controller struct {
	cfg     Config
	blocked []netip.Prefix
	port    int
	dns     *forwarder

	// nftMu orders every change of the kernel's table; it is taken before
	// mu, and an answer's addresses are loaded while holding it alone, so
	// lookups of other sandboxes (policyOf) never wait for an nft run.
	nftMu sync.Mutex

	mu       sync.Mutex
	byID     map[string]*entry
	byIP     map[netip.Addr]*entry
	reserved map[netip.Addr]time.Time // handed out by ReserveIP, not yet applied
	// tableUp: the table exists. It exists only while this backend has
	// restricted sandboxes, so a backend that never had one (or has none
	// left) leaves no trace in the kernel.
	tableUp bool
	// run loads an nft script (tests look at the scripts instead).
	run func(ctx context.Context, script string) error
}

// entry is one restricted sandbox.
type entry struct {
	id    string
	ip    netip.Addr
	mode  string
	allow []string                 // lower case, no trailing dot
	dsts  map[netip.Addr]time.Time // what its answers put into set allowed, until when
}

var _ sandbox.EgressEnforcer = (*Controller)(nil)

// builtinBlocked are never answered to a restricted sandbox: "this
// network", private, CGNAT, loopback, link-local (cloud metadata), IETF
// protocol assignments, benchmarking, multicast, reserved and broadcast.
var builtinBlocked = []string{
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4",
}

// Start starts the DNS forwarder on the gateway (a free port; restricted
// sandboxes' DNS is redirected to it). It installs no rules: Sync does,
// with the policies of every live sandbox, in one step.
func Start(cfg Config) (*Controller, error) {
	if cfg.Table == "" || cfg.Bridge == "" || !cfg.Gateway.Is4() || !cfg.Subnet.IsValid() || cfg.Upstream == "" || cfg.Used == nil {
		return nil, errors.New("egress: Table, Bridge, Gateway, Subnet, Upstream and Used are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Controller{
		cfg:      cfg,
		byID:     map[string]*entry{},
		byIP:     map[netip.Addr]*entry{},
		reserved: map[netip.Addr]time.Time{},
		run:      nft,
	}
	for _, s := range builtinBlocked {
		c.blocked = append(c.blocked, netip.MustParsePrefix(s))
	}
	c.blocked = append(c.blocked, cfg.Blocked...)
	fw, err := startForwarder(c)
	if err != nil {
		return nil, err
	}
	c.dns, c.port = fw, fw.port
	return c, nil
}

// Port is the DNS forwarder's port on the gateway.
func (c *Controller) Port() int { return c.port }

// Table is the nftables table this controller owns.
func (c *Controller) Table() string { return c.cfg.Table }

// Close stops the DNS forwarder. The rules stay: the sandboxes stay
// restricted while no backend runs (their DNS is then refused).
func (c *Controller) Close() error { return c.dns.close() }

// Available reports "": a started controller enforces.
func (c *Controller) Available() string { return "" }

// ReserveIP picks a free address outside the engine's range (without one,
// in the upper half of the subnet: Docker hands out addresses from the
// bottom), none in use, none reserved, none in avoid.
func (c *Controller) ReserveIP(ctx context.Context, avoid []string) (string, error) {
	used, err := c.cfg.Used(ctx)
	if err != nil {
		return "", err
	}
	taken := map[netip.Addr]bool{c.cfg.Gateway: true}
	for _, a := range used {
		taken[a] = true
	}
	for _, s := range avoid {
		if a, err := netip.ParseAddr(s); err == nil {
			taken[a] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for a, at := range c.reserved {
		if now.Sub(at) > time.Minute {
			delete(c.reserved, a)
		}
	}
	for a := range c.byIP {
		taken[a] = true
	}
	for a := range c.reserved {
		taken[a] = true
	}
	p := c.cfg.Subnet.Masked()
	hostBits := 32 - p.Bits()
	if hostBits < 3 {
		return "", fmt.Errorf("egress: subnet %s is too small", p)
	}
	size := 1 << hostBits
	lo, hi := size/2, size-2 // the upper half, without the broadcast address
	engine := c.cfg.EngineRange.Masked()
	where := "the upper half of " + p.String()
	if engine.IsValid() {
		lo = 1 // all but the network address, the broadcast and the engine's range
		where = p.String() + " outside " + engine.String()
	}
	base := p.Addr().As4()
	start := rand.IntN(hi - lo + 1)
	for i := 0; i <= hi-lo; i++ {
		n := lo + (start+i)%(hi-lo+1)
		b := base
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		v += uint32(n)
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		if !taken[a] && (!engine.IsValid() || !engine.Contains(a)) {
			c.reserved[a] = now
			return a.String(), nil
		}
	}
	return "", fmt.Errorf("egress: no free address left in %s", where)
}

func newEntry(p sandbox.EgressPolicy) (*entry, error) {
	ip, err := netip.ParseAddr(p.IP)
	if err != nil || !ip.Is4() {
		return nil, fmt.Errorf("egress: sandbox %s has no IPv4 address (%q)", p.SandboxID, p.IP)
	}
	if p.Mode != ModeDenyAll && p.Mode != ModeAllowList {
		return nil, fmt.Errorf("egress: sandbox %s: mode %q has no rules", p.SandboxID, p.Mode)
	}
	e := &entry{id: p.SandboxID, ip: ip, mode: p.Mode, dsts: map[netip.Addr]time.Time{}}
	for _, n := range p.Allowlist {
		e.allow = append(e.allow, strings.ToLower(strings.TrimSuffix(n, ".")))
	}
	return e, nil
}

// Apply installs one sandbox's policy, replacing an earlier one of the
// same sandbox, and of any sandbox that held the address before.
func (c *Controller) Apply(ctx context.Context, p sandbox.EgressPolicy) error {
	e, err := newEntry(p)
	if err != nil {
		return err
	}
	c.nftMu.Lock()
	defer c.nftMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.tableUp {
		c.byID[e.id], c.byIP[e.ip] = e, e
		if err := c.loadLocked(ctx); err != nil {
			delete(c.byID, e.id)
			delete(c.byIP, e.ip)
			return err
		}
		delete(c.reserved, e.ip)
		return nil
	}
	var b strings.Builder
	for _, old := range []*entry{c.byID[p.SandboxID], c.byIP[e.ip]} {
		if old != nil {
			c.removeLocked(&b, old)
		}
	}
	c.addSource(&b, e.mode, e.ip)
	if err := c.run(ctx, b.String()); err != nil {
		return err
	}
	c.byID[e.id], c.byIP[e.ip] = e, e
	delete(c.reserved, e.ip)
	return nil
}

// loadLocked replaces the table with the known entries in one
// transaction, or removes it when there are none.
func (c *Controller) loadLocked(ctx context.Context) error {
	if len(c.byID) == 0 {
		if err := c.run(ctx, deleteTable(c.cfg.Table)); err != nil {
			return err
		}
		c.tableUp = false
		return nil
	}
	var deny, listed []netip.Addr
	for _, e := range c.byID {
		e.dsts = map[netip.Addr]time.Time{}
		if e.mode == ModeDenyAll {
			deny = append(deny, e.ip)
		} else {
			listed = append(listed, e.ip)
		}
	}
	if err := c.run(ctx, c.ruleset(deny, listed)); err != nil {
		return err
	}
	c.tableUp = true
	return nil
}

// removeLocked writes the commands that undo an entry and forgets it.
func (c *Controller) removeLocked(b *strings.Builder, e *entry) {
	c.removeSource(b, e.mode, e.ip)
	for d := range e.dsts {
		c.forgetDest(b, e.ip, d)
	}
	if c.byID[e.id] == e {
		delete(c.byID, e.id)
	}
	if c.byIP[e.ip] == e {
		delete(c.byIP, e.ip)
	}
}

// Release removes a sandbox's policy and every address its answers
// allowed, so the next holder of its address starts clean.
func (c *Controller) Release(ctx context.Context, sandboxID string) error {
	c.nftMu.Lock()
	defer c.nftMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[sandboxID]
	if e == nil {
		return nil
	}
	var b strings.Builder
	c.removeLocked(&b, e)
	var err error
	if len(c.byID) == 0 {
		err = c.loadLocked(ctx) // the last one: the table goes
	} else {
		err = c.run(ctx, b.String())
	}
	if err != nil {
		// Keep it known, so a later Release or Sync retries.
		c.byID[e.id], c.byIP[e.ip] = e, e
		return err
	}
	return nil
}

// Sync replaces the whole table with exactly these policies in one
// transaction: no moment without rules for a sandbox that keeps its
// policy, and nothing left of the others.
func (c *Controller) Sync(ctx context.Context, ps []sandbox.EgressPolicy) error {
	byID := map[string]*entry{}
	byIP := map[netip.Addr]*entry{}
	for _, p := range ps {
		e, err := newEntry(p)
		if err != nil {
			return err
		}
		if other := byIP[e.ip]; other != nil {
			return fmt.Errorf("egress: sandboxes %s and %s both claim %s", other.id, e.id, e.ip)
		}
		byID[e.id], byIP[e.ip] = e, e
	}
	c.nftMu.Lock()
	defer c.nftMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	oldID, oldIP := c.byID, c.byIP
	c.byID, c.byIP = byID, byIP
	if err := c.loadLocked(ctx); err != nil {
		c.byID, c.byIP = oldID, oldIP
		return err
	}
	return nil
}

// policyOf is the entry of the sandbox at ip, copied (nil when none).
func (c *Controller) policyOf(ip netip.Addr) *entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byIP[ip.Unmap()]
	if e == nil {
		return nil
	}
	cp := *e
	cp.dsts = nil
	return &cp
}

// allowAnswers puts the addresses an allowed name resolved to into the
// sandbox's set, before the answer goes back to it. An address the set
// holds for more than half of the new TTL already is not loaded again, so
// repeated lookups of one name cost no nft run, and such a lookup never
// waits for nftMu: only an answer that needs a run takes it (Apply,
// Release and Sync wait for that run, and the entry cannot change
// meanwhile).
func (c *Controller) allowAnswers(ctx context.Context, id string, ip netip.Addr, addrs map[netip.Addr]time.Duration) error {
	if len(addrs) == 0 {
		return nil
	}
	if need, err := c.needed(id, ip, addrs); err != nil || len(need) == 0 {
		return err
	}
	c.nftMu.Lock()
	defer c.nftMu.Unlock()
	// Again under nftMu: a run that ended while this one waited may
	// have loaded the same addresses.
	need, err := c.needed(id, ip, addrs)
	if err != nil || len(need) == 0 {
		return err
	}
	var b strings.Builder
	for d, ttl := range need {
		c.allowDest(&b, ip, d, ttl)
	}
	now := time.Now()
	if err := c.run(ctx, b.String()); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id] // the same entry: changing it takes nftMu
	for d, until := range e.dsts {
		if now.After(until.Add(time.Second)) {
			delete(e.dsts, d) // the kernel dropped it already
		}
	}
	for d, ttl := range need {
		e.dsts[d] = now.Add(ttl)
	}
	return nil
}

// needed is the part of addrs that sandbox id (at ip) must have loaded:
// the addresses its set lacks or holds for less than half their TTL.
func (c *Controller) needed(id string, ip netip.Addr, addrs map[netip.Addr]time.Duration) (map[netip.Addr]time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byID[id]
	if e == nil || e.ip != ip {
		return nil, fmt.Errorf("egress: sandbox %s is gone", id)
	}
	now := time.Now()
	need := map[netip.Addr]time.Duration{}
	for d, ttl := range addrs {
		if until, ok := e.dsts[d]; !ok || until.Sub(now) < ttl/2 {
			need[d] = ttl
		}
	}
	return need, nil
}

// isBlocked reports addresses no answer may carry.
func (c *Controller) isBlocked(a netip.Addr) bool {
	a = a.Unmap()
	if !a.Is4() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || c.cfg.Subnet.Contains(a) {
		return true
	}
	for _, p := range c.blocked {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// allows matches a query name against an allowlist: an exact name, or a
// "*.suffix" entry for any name below the suffix.
func allows(list []string, qname string) bool {
	name := strings.ToLower(strings.TrimSuffix(qname, "."))
	for _, a := range list {
		if suffix, ok := strings.CutPrefix(a, "*."); ok {
			if strings.HasSuffix(name, "."+suffix) {
				return true
			}
			continue
		}
		if name == a {
			return true
		}
	}
	return false
}
