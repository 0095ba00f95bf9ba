package testbackend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/egress"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/hostnet"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// Egress control settings of Config.EgressControl.
const (
	EgressAuto = "auto"
	EgressOn   = "on"
	EgressOff  = "off"
)

// startEgress starts egress control as cfg.EgressControl asks. With
// "auto" a machine that cannot enforce it gives a backend without it (and
// the reason, which creates asking for a restricted mode are told); with
// "on" that is an error.
func startEgress(cfg Config, rt container.Runtime, instance string) (*egress.Controller, string, error) {
	mode := cfg.EgressControl
	switch mode {
	case "":
		mode = EgressAuto
	case EgressAuto, EgressOn, EgressOff:
	default:
		return nil, "", fmt.Errorf("egress-control must be auto, on or off, got %q", mode)
	}
	if mode == EgressOff {
		return nil, "egress control is turned off on this backend (--egress-control=off)", nil
	}
	c, err := newEgress(cfg, rt, instance)
	if err == nil {
		return c, "", nil
	}
	if mode == EgressOn {
		return nil, "", fmt.Errorf("egress control: %w", err)
	}
	why := "this backend cannot enforce egress control (" + err.Error() + ")"
	cfg.Logger.Warn("egress control unavailable; only egressMode ALLOW_ALL is accepted", "reason", err)
	return nil, why, nil
}

func newEgress(cfg Config, rt container.Runtime, instance string) (*egress.Controller, error) {
	d, ok := rt.(*container.Docker)
	if !ok {
		return nil, errors.New("it needs the Docker runtime")
	}
	if cfg.Network == container.NetworkNone {
		return nil, errors.New("sandboxes have no network (--network none)")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("it must run as root to change nftables rules")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, errors.New("the nft command is missing: run `make setup` (it installs nftables)")
	}
	n, ok, err := hostnet.Load(hostnet.File)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("the sandbox network is not set up (%s is missing): run `make setup`", hostnet.File)
	}
	if cfg.Network != "" && cfg.Network != n.Network {
		return nil, fmt.Errorf("sandboxes are on network %s, not on %s that make setup made", cfg.Network, n.Network)
	}
	subnet, err1 := netip.ParsePrefix(n.Subnet)
	gw, err2 := netip.ParseAddr(n.Gateway)
	if err := errors.Join(err1, err2); err != nil || n.Bridge == "" {
		return nil, fmt.Errorf("%s lacks bridge, subnet or gateway: run `make setup`", hostnet.File)
	}
	if err := hostnet.CheckEgressAccept(context.Background(), n.Bridge, n.Gateway); err != nil {
		return nil, err
	}
	engineRange, err := netip.ParsePrefix(n.IPAMRange)
	if err != nil {
		return nil, fmt.Errorf("%s: ipam_range %q: %w: run `make setup`", hostnet.File, n.IPAMRange, err)
	}
	var blocked []netip.Prefix
	for _, b := range n.Blocked {
		if p, err := netip.ParsePrefix(b); err == nil {
			blocked = append(blocked, p)
		}
	}
	upstream := cfg.EgressDNSUpstream
	if upstream == "" {
		if n.DNS == "" {
			return nil, fmt.Errorf("%s names no DNS forwarder to resolve allowed names with: run `make setup`", hostnet.File)
		}
		upstream = net.JoinHostPort(n.DNS, "53")
	}
	return egress.Start(egress.Config{
		Table:    egress.TablePrefix + instance,
		Bridge:   n.Bridge,
		Gateway:  gw,
		Subnet:   subnet,
		Blocked:  blocked,
		Upstream: upstream,
		// The pool the backend leases from (container/netns.go).
		EngineRange: engineRange,
		Used: func(ctx context.Context) ([]netip.Addr, error) {
			_, _, used, err := d.NetworkAddresses(ctx)
			return used, err
		},
		Logger: cfg.Logger,
	})
}

// egressEnforcer is what the sandbox manager gets: the controller, or a
// stand-in that explains why there is none.
func (b *Backend) egressEnforcer() sandbox.EgressEnforcer {
	if b.egress != nil {
		return b.egress
	}
	return unavailableEgress(b.egressWhy)
}

func (b *Backend) closeEgress() {
	if b.egress != nil {
		_ = b.egress.Close()
		b.egress = nil
	}
}

// Egress exposes the egress controller (nil without egress control), for tests.
func (b *Backend) Egress() *egress.Controller { return b.egress }

// unavailableEgress enforces nothing and says why.
type unavailableEgress string

func (u unavailableEgress) Available() string { return string(u) }
func (u unavailableEgress) ReserveIP(context.Context, []string) (string, error) {
	return "", errors.New(string(u))
}
func (u unavailableEgress) Apply(context.Context, sandbox.EgressPolicy) error {
	return errors.New(string(u))
}
func (u unavailableEgress) Release(context.Context, string) error { return nil }
func (u unavailableEgress) Sync(context.Context, []sandbox.EgressPolicy) error {
	return nil
}
