package docker

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/docker/docker/api/types/network"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// endpointFor asks the engine for the spec's fixed address, if it has one
// and the engine networks the sandbox (not when the backend wires it).
func (d *Runtime) endpointFor(spec container.Spec) *network.NetworkingConfig {
	if spec.IPv4 == "" || d.network == NetworkNone || d.own != nil {
		return nil
	}
	return &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		d.network: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: spec.IPv4}},
	}}
}

// NetworkAddresses reports the sandbox network's subnet and gateway and the
// IPv4 addresses its endpoints hold now, of every container on it (other
// backends' too), with those the backends lease to sandboxes they wired
// themselves (package netwire).
func (d *Runtime) NetworkAddresses(ctx context.Context) (subnet netip.Prefix, gateway netip.Addr, used []netip.Addr, err error) {
	if d.network == NetworkNone {
		return subnet, gateway, nil, fmt.Errorf("runtime: sandboxes have no network")
	}
	n, err := d.cli.NetworkInspect(ctx, d.network, network.InspectOptions{})
	if err != nil {
		if isEngineDown(err) {
			return subnet, gateway, nil, d.engineErr("inspect network "+d.network, err)
		}
		return subnet, gateway, nil, fmt.Errorf("runtime: inspect network %s: %w", d.network, err)
	}
	for _, c := range n.IPAM.Config {
		p, perr := netip.ParsePrefix(c.Subnet)
		if perr != nil || !p.Addr().Is4() {
			continue
		}
		subnet = p
		gateway, _ = netip.ParseAddr(c.Gateway)
		break
	}
	if !subnet.IsValid() {
		return subnet, gateway, nil, fmt.Errorf("runtime: network %s has no IPv4 subnet", d.network)
	}
	for _, ep := range n.Containers {
		if p, perr := netip.ParsePrefix(ep.IPv4Address); perr == nil {
			used = append(used, p.Addr())
		}
	}
	if d.own != nil {
		used = append(used, d.own.Leased()...)
	}
	return subnet, gateway, used, nil
}

// AddressPool is how many addresses the backend may lease to the
// sandboxes it wires itself (package netwire), shared with every backend on the
// bridge; 0 when the engine networks the sandboxes (its allocator then
// decides).
func (d *Runtime) AddressPool() int {
	if d.own == nil {
		return 0
	}
	return len(d.own.Candidates())
}

// NetworkLeases is how many of those addresses every backend on the bridge
// holds now, this one's included; nil when the engine networks the
// sandboxes.
func (d *Runtime) NetworkLeases() func() (int, error) {
	if d.own == nil {
		return nil
	}
	return d.own.LeaseCount
}
