package docker

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/netwire"
)

// These tests drive the real engine and gVisor with the wiring that make
// setup enables (network.json "netns", the runtime wrapper installed).

// requireOwnNet is an engine runtime that wires sandboxes itself.
func requireOwnNet(t *testing.T) *Runtime {
	t.Helper()
	d := requireEngine(t, Options{})
	if d.own == nil {
		t.Fatalf("the runtime does not wire sandboxes itself: %s does not say netns (with ipam_range) for the engine %s: run `make setup`", networkFile, d.host)
	}
	return d
}

// leaseOf is the address leased to container id, if any.
func leaseOf(t *testing.T, o *netwire.Wiring, id string) (netip.Addr, bool) {
	t.Helper()
	a, ok, err := o.LeaseOf(id)
	if err != nil {
		t.Fatal(err)
	}
	return a, ok
}

// wiringLeft says which parts of container id's wiring exist.
func wiringLeft(t *testing.T, o *netwire.Wiring, id string) []string {
	t.Helper()
	left, err := o.Remains(id)
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// TestOwnNetworkWiring: a sandbox wired by the backend has no engine
// network, one interface with a leased address outside the engine's range,
// reaches the DNS forwarder on the gateway, sees loopback names in
// /etc/hosts, and leaves nothing behind once removed.
func TestOwnNetworkWiring(t *testing.T) {
	t.Parallel()
	d := requireOwnNet(t)
	id := start(t, d, testSpec(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Config.NetworkDisabled || len(c.NetworkSettings.Networks) != 0 {
		t.Errorf("the engine networked the sandbox: NetworkDisabled %v, networks %v", c.Config.NetworkDisabled, c.NetworkSettings.Networks)
	}
	addr, ok := leaseOf(t, d.own, id)
	if !ok {
		t.Fatalf("no lease for %s in %s", id, d.own.LeaseDir())
	}
	if !d.own.Subnet().Contains(addr) || d.own.EngineRange().Contains(addr) || addr == d.own.Gateway() {
		t.Errorf("leased %s: want an address of %s outside the engine's %s", addr, d.own.Subnet(), d.own.EngineRange())
	}
	if left := wiringLeft(t, d.own, id); len(left) != 3 {
		t.Errorf("wiring of a running sandbox: %v, want namespace, lease and veth", left)
	}

	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"bash", "-c",
		"tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; echo; hostname -I; " +
			"exec 3<>/dev/tcp/" + d.own.Gateway().String() + "/53 && echo DNS-CONNECTED; " +
			"getent hosts \"$(hostname)\" | cut -d' ' -f1; getent hosts localhost | cut -d' ' -f1 | sort | head -1"}})
	wantExit(t, res, 0)
	out := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if len(out) != 5 || strings.TrimSpace(out[0]) != "eth0 lo" || strings.TrimSpace(out[1]) != addr.String() ||
		out[2] != "DNS-CONNECTED" || out[3] != addr.String() || (out[4] != "127.0.0.1" && out[4] != "::1") {
		t.Fatalf("inside the sandbox: %q (stderr %q), want interfaces \"eth0 lo\", address %s, DNS-CONNECTED, its hostname at %[3]s, localhost at loopback",
			out, res.Stderr, addr)
	}
	// No IPv6 on the bridge end: nothing link-local for a sandbox to use.
	if v, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + netwire.HostIface(id) + "/disable_ipv6"); err == nil && strings.TrimSpace(string(v)) != "1" {
		t.Errorf("IPv6 is on for %s", netwire.HostIface(id))
	}

	target, err := os.Readlink(filepath.Join(hostsDir, id))
	if err != nil {
		t.Fatalf("no hosts file link for %s: %v", id, err)
	}
	hosts := filepath.Join(hostsDir, target)
	if err := d.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if left := wiringLeft(t, d.own, id); len(left) != 0 {
		t.Errorf("after Remove: %v left", left)
	}
	for _, p := range []string{hosts, filepath.Join(hostsDir, id)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Remove: %v", p, err)
		}
	}
}

// TestOwnNetworkFixedAddress: a sandbox gets the address it asks for (the
// egress controller's), and a second one asking for the same address is
// refused in words the sandbox manager recognises, leaving nothing behind.
func TestOwnNetworkFixedAddress(t *testing.T) {
	t.Parallel()
	d := requireOwnNet(t)
	var want netip.Addr
	for _, a := range d.own.Candidates() {
		if _, err := os.Lstat(filepath.Join(d.own.LeaseDir(), a.String())); errors.Is(err, os.ErrNotExist) {
			want = a
			break
		}
	}
	spec := testSpec(t)
	spec.IPv4 = want.String()
	id := start(t, d, spec)
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"hostname", "-I"}})
	wantExit(t, res, 0)
	if got := strings.TrimSpace(string(res.Stdout)); got != want.String() {
		t.Fatalf("sandbox address %q, want %s", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec2 := testSpec(t)
	spec2.IPv4 = want.String()
	id2, err := d.Start(ctx, spec2)
	if err == nil {
		_ = d.Remove(ctx, id2)
		t.Fatalf("a second sandbox got %s too", want)
	}
	if !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("second sandbox on %s: %v, want an 'address already in use' refusal", want, err)
	}
	if id2 != "" {
		if left := wiringLeft(t, d.own, id2); len(left) != 0 {
			t.Errorf("the refused sandbox left %v", left)
		}
		if _, err := d.Inspect(ctx, id2); !errors.Is(err, container.ErrNotFound) {
			t.Errorf("the refused sandbox's container is still there: %v", err)
		}
	}
	if a, ok := leaseOf(t, d.own, id); !ok || a != want {
		t.Errorf("the first sandbox's lease: %v %v, want %s", a, ok, want)
	}
}

// TestSweepNetworks: the wiring of a container that does not exist (what a
// backend that crashed leaves) is swept, a lease whose namespace is gone
// too, and a running sandbox's wiring is kept.
func TestSweepNetworks(t *testing.T) {
	t.Parallel()
	d := requireOwnNet(t)
	live := start(t, d, testSpec(t))

	ghost := "f00d" + strings.Repeat("0", 52) + randomID(t)
	if _, err := d.own.Attach(ghost, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.own.Detach(ghost) })
	stale := filepath.Join(d.own.LeaseDir(), "ghost-lease-"+randomID(t))
	if err := os.Symlink("no-such-container-"+randomID(t), stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(stale) })
	// A gone container's hosts file with its link, and a hosts file of a
	// create that never finished (older than a minute, mounted by nobody).
	ghostHosts := filepath.Join(hostsDir, "hosts-ghost-"+randomID(t))
	orphanHosts := filepath.Join(hostsDir, "hosts-orphan-"+randomID(t))
	for _, p := range []string{ghostHosts, orphanHosts} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove(p) })
	}
	if err := os.Symlink(filepath.Base(ghostHosts), filepath.Join(hostsDir, ghost)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(filepath.Join(hostsDir, ghost)) })
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(orphanHosts, old, old); err != nil {
		t.Fatal(err)
	}
	liveHosts, err := os.Readlink(filepath.Join(hostsDir, live))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(hostsDir, liveHosts), old, old); err != nil {
		t.Fatal(err)
	}
	// Control: the leftovers are there before the sweep.
	if left := wiringLeft(t, d.own, ghost); len(left) != 3 {
		t.Fatalf("leftover wiring before the sweep: %v, want namespace, lease and veth", left)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := d.SweepNetworks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if left := wiringLeft(t, d.own, ghost); len(left) != 0 {
		t.Errorf("after the sweep (%d removed): %v of the gone container left", n, left)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a lease without a namespace survived the sweep: %v", err)
	}
	for _, p := range []string{ghostHosts, orphanHosts, filepath.Join(hostsDir, ghost)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived the sweep: %v", p, err)
		}
	}
	if left := wiringLeft(t, d.own, live); len(left) != 3 {
		t.Errorf("the running sandbox's wiring after the sweep: %v, want all of it", left)
	}
	for _, p := range []string{filepath.Join(hostsDir, live), filepath.Join(hostsDir, liveHosts)} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("the running sandbox's hosts file after the sweep: %v", err)
		}
	}
	res := exec(t, d, live, container.ExecRequest{Cmd: []string{"bash", "-c", "exec 3<>/dev/tcp/" + d.own.Gateway().String() + "/53 && echo OK"}})
	wantExit(t, res, 0)
}
