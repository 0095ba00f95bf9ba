// Command rarecloud-netfile writes the sandbox network's description
// (hostnet.File, /etc/rarecloud/network.json) for make setup, through the
// one type every reader uses. It prints "changed" or "unchanged".
//
//	rarecloud-netfile -network rarecloud-sandbox -bridge rcsbx0 \
//	  -subnet 172.30.99.0/24 -gateway 172.30.99.1 -ipam-range 172.30.99.0/26 \
//	  -netns -dns 172.30.99.1 -mtu 1400 -blocked 10.0.0.0/8,... \
//	  -engine unix:///run/rarecloud/docker.sock
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/hostnet"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rarecloud-netfile:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("rarecloud-netfile", flag.ContinueOnError)
	var n hostnet.Network
	var blocked string
	out := fs.String("out", hostnet.File, "the file to write")
	fs.StringVar(&n.Network, "network", "", "the engine's name of the sandbox network")
	fs.StringVar(&n.Bridge, "bridge", "", "the sandbox network's interface on the host")
	fs.StringVar(&n.Subnet, "subnet", "", "the sandbox addresses (IPv4 prefix)")
	fs.StringVar(&n.Gateway, "gateway", "", "the host's address on the sandbox network")
	fs.StringVar(&n.IPAMRange, "ipam-range", "", "the part of the subnet the engine's allocator uses")
	fs.BoolVar(&n.Netns, "netns", false, "the runtime wrapper is installed: the backend wires sandboxes itself")
	fs.StringVar(&n.DNS, "dns", "", "the sandboxes' DNS forwarder")
	fs.IntVar(&n.MTU, "mtu", 0, "the sandbox network's MTU")
	fs.StringVar(&blocked, "blocked", "", "comma-separated ranges the firewall refuses to sandboxes")
	fs.StringVar(&n.Engine, "engine", "", "the engine setup started")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, b := range strings.Split(blocked, ",") {
		if b = strings.TrimSpace(b); b != "" {
			if _, err := netip.ParsePrefix(b); err != nil {
				return fmt.Errorf("-blocked: %w", err)
			}
			n.Blocked = append(n.Blocked, b)
		}
	}
	if err := check(n); err != nil {
		return err
	}
	changed, err := n.Write(*out)
	if err != nil {
		return err
	}
	if changed {
		fmt.Println("changed")
	} else {
		fmt.Println("unchanged")
	}
	return nil
}

// check refuses a description no reader could use.
func check(n hostnet.Network) error {
	if n.Network == "" || n.Bridge == "" {
		return fmt.Errorf("-network and -bridge are required")
	}
	subnet, err := netip.ParsePrefix(n.Subnet)
	if err != nil || !subnet.Addr().Is4() {
		return fmt.Errorf("-subnet %q is not an IPv4 prefix", n.Subnet)
	}
	for flagName, a := range map[string]string{"-gateway": n.Gateway, "-dns": n.DNS} {
		if a == "" && flagName == "-dns" {
			continue
		}
		if ip, err := netip.ParseAddr(a); err != nil || !subnet.Contains(ip) {
			return fmt.Errorf("%s %q is not an address in %s", flagName, a, subnet)
		}
	}
	if n.IPAMRange != "" {
		if p, err := netip.ParsePrefix(n.IPAMRange); err != nil || !subnet.Contains(p.Addr()) || p.Bits() < subnet.Bits() {
			return fmt.Errorf("-ipam-range %q is not inside %s", n.IPAMRange, subnet)
		}
	}
	if n.MTU < 0 {
		return fmt.Errorf("-mtu %d is negative", n.MTU)
	}
	return nil
}
