package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"time"
)

// The kernel side: one nftables table per backend instance (family inet),
// apart from Docker's and setup's iptables rules, which it never touches.
// Its base chains run just before theirs (priority -10 against filter's 0;
// the DNS redirect at -110 against dstnat's -100), and a reject here is
// final whatever later chains would accept:
//
//   - set deny holds the addresses of DENY_ALL sandboxes: everything new
//     from them is refused, forwarded (the internet) and to the host; their
//     UDP DNS goes to the backend's forwarder, which refuses it at once;
//   - set listed holds the ALLOW_LIST sandboxes: a new forwarded connection
//     passes only when "sandbox . destination" is in set allowed, which the
//     backend's DNS forwarder fills from the answers for allowed names, each
//     element timing out with the answer's TTL; their DNS to the gateway is
//     redirected to that forwarder, which knows the asker by its address.
//
// Refusals are fast: TCP gets a reset, everything else an ICMP
// administratively-prohibited, so a connect fails at once instead of
// hanging.

// ruleset is the whole table, written so that loading it replaces what
// was there in one transaction.
func (c *Controller) ruleset(deny, listed []netip.Addr) string {
	var b strings.Builder
	t := c.cfg.Table
	fmt.Fprintf(&b, "table inet %s {}\ndelete table inet %s\n", t, t)
	fmt.Fprintf(&b, "table inet %s {\n", t)
	fmt.Fprintf(&b, "  set deny { type ipv4_addr; %s}\n", elements(deny))
	fmt.Fprintf(&b, "  set listed { type ipv4_addr; %s}\n", elements(listed))
	b.WriteString("  set allowed { type ipv4_addr . ipv4_addr; flags timeout; }\n")
	// The kernel's guard for the forwarder's one socket: a restricted
	// sandbox's DNS packets past twice its forwarder rate (and burst) are
	// dropped before they reach the socket, whose queue a flood would
	// otherwise fill for every other sandbox. The forwarder's own limiter
	// (limit.go) is the exact bound below it.
	b.WriteString("  set dnsrate { type ipv4_addr; flags dynamic,timeout; timeout 1m; size 1024; }\n")
	b.WriteString("  chain refuse {\n    meta l4proto tcp reject with tcp reset\n    reject with icmpx type admin-prohibited\n  }\n")
	br := quote(c.cfg.Bridge)
	fmt.Fprintf(&b, "  chain input {\n    type filter hook input priority -10; policy accept;\n")
	fmt.Fprintf(&b, "    iifname %s ip saddr @deny ip daddr %s udp dport %d ct status dnat return\n", br, c.cfg.Gateway, c.port)
	fmt.Fprintf(&b, "    iifname %s ip saddr @deny ct state != { established, related } jump refuse\n  }\n", br)
	fmt.Fprintf(&b, "  chain forward {\n    type filter hook forward priority -10; policy accept;\n")
	fmt.Fprintf(&b, "    iifname %s ip saddr @deny ct state != { established, related } jump refuse\n", br)
	fmt.Fprintf(&b, "    iifname %s ip saddr @listed ct state != { established, related } ip saddr . ip daddr != @allowed jump refuse\n  }\n", br)
	lim := c.cfg.Limits.withDefaults()
	fmt.Fprintf(&b, "  chain dnsguard {\n    type filter hook prerouting priority -120; policy accept;\n")
	for _, set := range []string{"listed", "deny"} {
		fmt.Fprintf(&b, "    iifname %s ip saddr @%s ip daddr %s udp dport 53 update @dnsrate { ip saddr limit rate over %d/second burst %d packets } drop\n",
			br, set, c.cfg.Gateway, int(2*lim.Rate), 2*lim.Burst)
	}
	b.WriteString("  }\n")
	fmt.Fprintf(&b, "  chain dns {\n    type nat hook prerouting priority -110; policy accept;\n")
	for _, proto := range []string{"udp", "tcp"} {
		fmt.Fprintf(&b, "    iifname %s ip saddr @listed ip daddr %s %s dport 53 dnat ip to %s:%d\n", br, c.cfg.Gateway, proto, c.cfg.Gateway, c.port)
	}
	// DENY_ALL: the forwarder refuses every query at once (an ICMP error
	// for UDP leaves resolvers waiting for their timeout); TCP gets a reset.
	fmt.Fprintf(&b, "    iifname %s ip saddr @deny ip daddr %s udp dport 53 dnat ip to %s:%d\n", br, c.cfg.Gateway, c.cfg.Gateway, c.port)
	b.WriteString("  }\n}\n")
	return b.String()
}

func elements(addrs []netip.Addr) string {
	if len(addrs) == 0 {
		return ""
	}
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	sort.Strings(s)
	return "elements = { " + strings.Join(s, ", ") + " }; "
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, "") + `"` }

// setOf is the set a mode's sandboxes are in.
func setOf(mode string) string {
	if mode == ModeDenyAll {
		return "deny"
	}
	return "listed"
}

// addSource and removeSource change one sandbox's membership. "add"
// before "delete" makes a removal succeed whether or not the element is
// there (nft refuses to delete a missing element).
func (c *Controller) addSource(b *strings.Builder, mode string, ip netip.Addr) {
	fmt.Fprintf(b, "add element inet %s %s { %s }\n", c.cfg.Table, setOf(mode), ip)
}

func (c *Controller) removeSource(b *strings.Builder, mode string, ip netip.Addr) {
	fmt.Fprintf(b, "add element inet %s %s { %s }\ndelete element inet %s %s { %s }\n", c.cfg.Table, setOf(mode), ip, c.cfg.Table, setOf(mode), ip)
}

// allowDest lets ip reach dst for ttl; an element already there gets the
// new timeout (it is replaced in the same transaction, so no connect in
// between is refused).
func (c *Controller) allowDest(b *strings.Builder, ip, dst netip.Addr, ttl time.Duration) {
	el := ip.String() + " . " + dst.String()
	fmt.Fprintf(b, "add element inet %s allowed { %s }\ndelete element inet %s allowed { %s }\n", c.cfg.Table, el, c.cfg.Table, el)
	fmt.Fprintf(b, "add element inet %s allowed { %s timeout %ds }\n", c.cfg.Table, el, int(ttl/time.Second))
}

func (c *Controller) forgetDest(b *strings.Builder, ip, dst netip.Addr) {
	el := ip.String() + " . " + dst.String()
	fmt.Fprintf(b, "add element inet %s allowed { %s }\ndelete element inet %s allowed { %s }\n", c.cfg.Table, el, c.cfg.Table, el)
}

// nft runs a script in one transaction: all of it or nothing.
func nft(ctx context.Context, script string) error {
	if script == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// DeleteTable removes a table (tests, and an operator cleaning up).
func DeleteTable(ctx context.Context, table string) error {
	return nft(ctx, deleteTable(table))
}

// deleteTable removes a table whether or not it exists.
func deleteTable(table string) string {
	return fmt.Sprintf("table inet %s {}\ndelete table inet %s\n", table, table)
}

// Tables lists the inet tables whose name starts with prefix. A host
// without the nft command has none.
func Tables(ctx context.Context, prefix string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nft", "list", "tables").Output()
	if errors.Is(err, exec.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nft list tables: %w", err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "table" && f[1] == "inet" && strings.HasPrefix(f[2], prefix) {
			names = append(names, f[2])
		}
	}
	return names, nil
}
