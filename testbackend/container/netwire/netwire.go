// Package netwire wires sandboxes to the host's sandbox bridge without the
// engine: a network namespace, a veth pair and an address lease each.
//
// Docker's networking costs about half a CPU-second per sandbox on this kind
// of machine: dockerd re-executes itself twice in the container's namespace
// (its embedded resolver, which gVisor cannot use, and the IPv6 switch) and
// runs once more as the runtime's prestart hook. On the network make setup
// made, the backend therefore wires each sandbox itself, with a few netlink
// calls from this process: the container is created without a network, the
// backend makes a network namespace for it (ocispec.NetnsDir/<container
// id>) holding one end of a veth pair with the sandbox's address and a
// default route via the gateway, the other end on the sandbox bridge, and
// the runtime wrapper (cmd/rarecloud-runsc) has runsc join it. The bridge is
// the same one, so the firewall rules on it (setup's, the engine's
// masquerade and inter-container drop, the egress controller's per-address
// rules) apply unchanged.
//
// Addresses come from the part of the subnet the engine's allocator does
// not use (setup gives the engine the range network.json "ipam_range"). An
// address lease is a symlink LeaseDir/<address> -> <container id>, made with
// symlink(2), which fails when the name exists: backends sharing the bridge
// never hand out one address twice. A lease always points at an existing
// namespace: the namespace is made before the lease and removed after it, so
// a lease whose namespace is gone is a leftover of a crash (Wiring.Sweep).
package netwire

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/hostnet"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/ocispec"
)

// LeaseDir holds the address leases of sandboxes wired by the backend.
const LeaseDir = "/run/rarecloud/addr"

// sandboxIface is the sandbox's end of its veth pair.
const sandboxIface = "eth0"

// Wiring is the sandbox bridge as network.json describes it, when setup
// installed the runtime wrapper that lets the backend wire sandboxes.
type Wiring struct {
	bridge  string
	subnet  netip.Prefix
	gateway netip.Addr
	ipam    netip.Prefix // the engine's share of the subnet
	mtu     int
	netns   string // ocispec.NetnsDir, or a test's
	leases  string // LeaseDir, or a test's
}

// FromNetwork reads the wiring parameters from setup's network description;
// nil when setup did not install the wrapper (sandboxes then use the engine's
// network).
func FromNetwork(n hostnet.Network) (*Wiring, error) {
	if !n.Netns {
		return nil, nil
	}
	subnet, err := netip.ParsePrefix(n.Subnet)
	if err != nil || !subnet.Addr().Is4() {
		return nil, fmt.Errorf("runtime: %s: subnet %q is not an IPv4 prefix", hostnet.File, n.Subnet)
	}
	gw, err := netip.ParseAddr(n.Gateway)
	if err != nil || !subnet.Contains(gw) {
		return nil, fmt.Errorf("runtime: %s: gateway %q is not in %s", hostnet.File, n.Gateway, subnet)
	}
	ipam, err := netip.ParsePrefix(n.IPAMRange)
	if err != nil || !subnet.Contains(ipam.Addr()) || ipam.Bits() < subnet.Bits() {
		return nil, fmt.Errorf("runtime: %s: ipam_range %q is not inside %s", hostnet.File, n.IPAMRange, subnet)
	}
	if n.Bridge == "" {
		return nil, fmt.Errorf("runtime: %s names no bridge", hostnet.File)
	}
	mtu := n.MTU
	if mtu <= 0 {
		mtu = 1500
	}
	return &Wiring{bridge: n.Bridge, subnet: subnet.Masked(), gateway: gw, ipam: ipam.Masked(), mtu: mtu,
		netns: ocispec.NetnsDir, leases: LeaseDir}, nil
}

// Subnet is the sandbox bridge's subnet.
func (o *Wiring) Subnet() netip.Prefix { return o.subnet }

// Gateway is the sandboxes' gateway on the bridge.
func (o *Wiring) Gateway() netip.Addr { return o.gateway }

// EngineRange is the engine's share of the subnet, which the backend never
// leases.
func (o *Wiring) EngineRange() netip.Prefix { return o.ipam }

// LeaseDir is where the address leases are (LeaseDir, or a test's).
func (o *Wiring) LeaseDir() string { return o.leases }

// HostIface names the bridge end of a container's veth pair (15 bytes at
// most).
func HostIface(id string) string {
	if len(id) > 12 {
		id = id[:12]
	}
	return "rcv" + id
}

// Candidates lists the addresses the backend may lease, from a random
// starting point, so that backends starting together rarely collide.
func (o *Wiring) Candidates() []netip.Addr {
	var out []netip.Addr
	last := lastAddr(o.subnet)
	for a := o.subnet.Addr().Next(); a.IsValid() && a.Less(last); a = a.Next() {
		if a == o.gateway || o.ipam.Contains(a) {
			continue
		}
		out = append(out, a)
	}
	if len(out) > 0 {
		k := rand.IntN(len(out))
		out = append(out[k:], out[:k]...)
	}
	return out
}

// lastAddr is the broadcast address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// errAddressInUse is what a fixed address that another sandbox leases
// gives (worded like the engine's answer, which the sandbox manager
// recognises and then picks another).
var errAddressInUse = errors.New("address already in use")

// Attach wires container id: its namespace, a lease on want (or on any free
// address when want is empty) and the veth pair. It returns the address.
// On error nothing of it is left behind.
func (o *Wiring) Attach(id, want string) (addr netip.Addr, err error) {
	if err := os.MkdirAll(o.netns, 0o700); err != nil {
		return addr, err
	}
	if err := os.MkdirAll(o.leases, 0o700); err != nil {
		return addr, err
	}
	nsPath := filepath.Join(o.netns, id)
	if err := newNetns(nsPath); err != nil {
		return addr, fmt.Errorf("network namespace for %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			o.Detach(id)
		}
	}()
	addr, err = o.leaseAddr(id, want)
	if err != nil {
		return addr, err
	}
	if err := o.wire(id, nsPath, addr); err != nil {
		return addr, fmt.Errorf("wiring %s to %s: %w", id, o.bridge, err)
	}
	return addr, nil
}

// leaseAddr takes want, or the first free candidate.
func (o *Wiring) leaseAddr(id, want string) (netip.Addr, error) {
	if want != "" {
		a, err := netip.ParseAddr(want)
		if err != nil || !o.subnet.Contains(a) || a == o.gateway || o.ipam.Contains(a) {
			return netip.Addr{}, fmt.Errorf("address %q is not one the backend may lease in %s", want, o.subnet)
		}
		if err := os.Symlink(id, filepath.Join(o.leases, a.String())); err != nil {
			if errors.Is(err, os.ErrExist) {
				return netip.Addr{}, fmt.Errorf("lease %s: %w", a, errAddressInUse)
			}
			return netip.Addr{}, err
		}
		return a, nil
	}
	for _, a := range o.Candidates() {
		err := os.Symlink(id, filepath.Join(o.leases, a.String()))
		if err == nil {
			return a, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return netip.Addr{}, err
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address left in %s outside %s", o.subnet, o.ipam)
}

// newNetns makes a network namespace with IPv6 off (as the engine does: no
// link-local addresses) and loopback up, bind-mounted at path.
//
// The calling goroutine's thread enters the new namespace and then goes
// back, and only then is it unlocked. It must not be retired instead (what
// a goroutine that exits while locked does): a child process started with
// a parent-death signal (terraform-exec's SIGKILL, in the provider's tests
// that run a backend in-process) would die with the thread that forked it.
func newNetns(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	_ = f.Close()
	if err := inNewNetns(func() error {
		// /proc/sys/net is the namespace of the thread that opens it.
		for _, k := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("disable IPv6: %w", err)
			}
		}
		if lo, err := netlink.LinkByName("lo"); err == nil {
			if err := netlink.LinkSetUp(lo); err != nil {
				return fmt.Errorf("loopback up: %w", err)
			}
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount: %w", err)
		}
		return nil
	}); err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// inNewNetns runs fn on this goroutine's thread in a new network namespace,
// then puts the thread back in the namespace it had.
func inNewNetns(fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("current network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("unshare: %w", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Stranded in the new namespace: the thread stays locked, and is
		// retired when this goroutine ends, rather than serve others there.
		return errors.Join(ferr, fmt.Errorf("back to the host network namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// wire makes the veth pair: the sandbox's end in the namespace with addr and
// a default route via the gateway, the other on the bridge.
func (o *Wiring) wire(id, nsPath string, addr netip.Addr) error {
	br, err := netlink.LinkByName(o.bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", o.bridge, err)
	}
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return err
	}
	defer ns.Close()
	host := HostIface(id)
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: host, MTU: o.mtu, MasterIndex: br.Attrs().Index},
		PeerName:      sandboxIface,
		PeerNamespace: netlink.NsFd(ns),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s: %w", host, err)
	}
	// The bridge end needs no address of its own, IPv6 link-local included.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+host+"/disable_ipv6", []byte("1"), 0)
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	eth, err := h.LinkByName(sandboxIface)
	if err != nil {
		return err
	}
	ipnet := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(o.subnet.Bits(), 32)}
	if err := h.AddrAdd(eth, &netlink.Addr{IPNet: ipnet}); err != nil {
		return fmt.Errorf("address %s: %w", addr, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return err
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: o.gateway.AsSlice()}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	hostLink, err := netlink.LinkByName(host)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(hostLink)
}

// Detach undoes Attach for container id, whatever part of it exists: the
// lease first (a lease must never outlive its namespace), then the
// namespace, then the bridge end of the veth pair (normally gone with the
// namespace already).
func (o *Wiring) Detach(id string) {
	if ents, err := os.ReadDir(o.leases); err == nil {
		for _, e := range ents {
			p := filepath.Join(o.leases, e.Name())
			if t, err := os.Readlink(p); err == nil && t == id {
				_ = os.Remove(p)
			}
		}
	}
	nsPath := filepath.Join(o.netns, id)
	if err := unix.Unmount(nsPath, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return // still mounted: keep the file, the sweep tries again
	}
	_ = os.Remove(nsPath)
	if l, err := netlink.LinkByName(HostIface(id)); err == nil {
		_ = netlink.LinkDel(l)
	}
}

// Leased lists the addresses leased now, by every backend on the host.
func (o *Wiring) Leased() []netip.Addr {
	out, _ := o.leased()
	return out
}

// LeaseCount is how many addresses every backend on the host has leased.
func (o *Wiring) LeaseCount() (int, error) {
	out, err := o.leased()
	return len(out), err
}

func (o *Wiring) leased() ([]netip.Addr, error) {
	ents, err := os.ReadDir(o.leases)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ents))
	for _, e := range ents {
		if a, err := netip.ParseAddr(e.Name()); err == nil {
			out = append(out, a)
		}
	}
	return out, nil
}

// LeaseOf is the address leased to container id, if any.
func (o *Wiring) LeaseOf(id string) (netip.Addr, bool, error) {
	ents, err := os.ReadDir(o.leases)
	if err != nil {
		return netip.Addr{}, false, err
	}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(o.leases, e.Name())); err == nil && target == id {
			a, err := netip.ParseAddr(e.Name())
			if err != nil {
				return netip.Addr{}, false, fmt.Errorf("lease %s: %w", e.Name(), err)
			}
			return a, true, nil
		}
	}
	return netip.Addr{}, false, nil
}

// Remains says which parts of container id's wiring exist: "namespace",
// "lease", "veth <name>"; none once Detach is done.
func (o *Wiring) Remains(id string) ([]string, error) {
	var left []string
	if _, err := os.Stat(filepath.Join(o.netns, id)); err == nil {
		left = append(left, "namespace")
	}
	_, leased, err := o.LeaseOf(id)
	if err != nil {
		return nil, err
	}
	if leased {
		left = append(left, "lease")
	}
	if _, err := netlink.LinkByName(HostIface(id)); err == nil {
		left = append(left, "veth "+HostIface(id))
	}
	return left, nil
}

// Sweep removes the namespaces of containers that no longer exist and
// leases whose namespace is gone: what a crash between Attach and Detach
// leaves. The directory is read before the engine's containers are listed,
// and a namespace is made only after its container, so a sandbox being
// wired meanwhile is never swept.
func (o *Wiring) Sweep(containers func() (map[string]bool, error)) (removed int, err error) {
	ents, err := os.ReadDir(o.netns)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	live, err := containers()
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		id := e.Name()
		if strings.HasPrefix(id, ".") || live[id] {
			continue
		}
		o.Detach(id)
		removed++
	}
	leases, err := os.ReadDir(o.leases)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return removed, err
	}
	for _, e := range leases {
		p := filepath.Join(o.leases, e.Name())
		t, err := os.Readlink(p)
		if err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(o.netns, t)); errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(p)
			removed++
		}
	}
	return removed, nil
}
