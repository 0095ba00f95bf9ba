package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/hostnet"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// Settings of egress control, HostSetup.Control.
const (
	ControlAuto = "auto" // on when the machine can enforce it
	ControlOn   = "on"   // on, or the backend does not start
	ControlOff  = "off"
)

// HostSetup is what starting egress control on this machine takes beside
// the sandbox network make setup described (hostnet.File).
type HostSetup struct {
	// Control is ControlAuto (also ""), ControlOn or ControlOff.
	Control string
	// Instance is the backend instance: its table is TablePrefix+Instance.
	Instance string
	// Network is the sandboxes' network as the backend was told it ("":
	// the one make setup made); NoNetwork says sandboxes have none.
	Network   string
	NoNetwork bool
	// DNSUpstream overrides where allowed names are resolved (default the
	// sandboxes' forwarder make setup runs).
	DNSUpstream string
	// Used reports the addresses taken on the sandbox network now, of
	// every container on it (Config.Used); nil when the runtime cannot.
	Used   func(context.Context) ([]netip.Addr, error)
	Logger *slog.Logger
}

// StartOnHost starts egress control as s.Control asks. With ControlAuto a
// machine that cannot enforce it gives no controller and the reason
// (which creates asking for a restricted mode are told); with ControlOn
// that is an error.
func StartOnHost(s HostSetup) (*Controller, string, error) {
	mode := s.Control
	switch mode {
	case "":
		mode = ControlAuto
	case ControlAuto, ControlOn, ControlOff:
	default:
		return nil, "", fmt.Errorf("egress-control must be auto, on or off, got %q", mode)
	}
	if mode == ControlOff {
		return nil, "egress control is turned off on this backend (--egress-control=off)", nil
	}
	c, err := startOnHost(s)
	if err == nil {
		return c, "", nil
	}
	if mode == ControlOn {
		return nil, "", fmt.Errorf("egress control: %w", err)
	}
	why := "this backend cannot enforce egress control (" + err.Error() + ")"
	if s.Logger != nil {
		s.Logger.Warn("egress control unavailable; only egressMode ALLOW_ALL is accepted", "reason", err)
	}
	return nil, why, nil
}

func startOnHost(s HostSetup) (*Controller, error) {
	if s.Used == nil {
		return nil, errors.New("it needs the Docker runtime")
	}
	if s.NoNetwork {
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
	if s.Network != "" && s.Network != n.Network {
		return nil, fmt.Errorf("sandboxes are on network %s, not on %s that make setup made", s.Network, n.Network)
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
	upstream := s.DNSUpstream
	if upstream == "" {
		if n.DNS == "" {
			return nil, fmt.Errorf("%s names no DNS forwarder to resolve allowed names with: run `make setup`", hostnet.File)
		}
		upstream = net.JoinHostPort(n.DNS, "53")
	}
	return Start(Config{
		Table:    TablePrefix + s.Instance,
		Bridge:   n.Bridge,
		Gateway:  gw,
		Subnet:   subnet,
		Blocked:  blocked,
		Upstream: upstream,
		// The pool the backend leases from (package container/netwire).
		EngineRange: engineRange,
		Used:        s.Used,
		Logger:      s.Logger,
	})
}

// Unavailable enforces nothing and says why: what the sandbox manager
// gets when there is no egress control.
type Unavailable string

var _ sandbox.EgressEnforcer = Unavailable("")

// Available reports why there is no egress control.
func (u Unavailable) Available() string { return string(u) }

// ReserveIP fails: no address is held for anyone.
func (u Unavailable) ReserveIP(context.Context, []string) (string, error) {
	return "", errors.New(string(u))
}

// Apply fails: no policy can be enforced.
func (u Unavailable) Apply(context.Context, sandbox.EgressPolicy) error {
	return errors.New(string(u))
}

// Release has nothing to release.
func (u Unavailable) Release(context.Context, string) error { return nil }

// Sync has nothing to sync.
func (u Unavailable) Sync(context.Context, []sandbox.EgressPolicy) error {
	return nil
}
