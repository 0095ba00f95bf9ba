package isolation

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeNet is a "fake internet" the test owns: a network namespace behind
// a veth pair, holding a private address (10.99.X.1), the cloud metadata
// address 169.254.169.254 and a public-looking address (198.51.100.Y,
// TEST-NET-2), with host routes to each through the veth. Nothing of it
// leaves the machine: every address the tests connect to lives in the
// namespace, and the routes are checked to point into it before anything
// connects.
type fakeNet struct {
	ns, hostIf, nsIf string
	hostAddr         string // the host's end of the veth
	private, meta    string
	public           string

	token string
	ln    net.Listener
	mu    sync.Mutex
	seen  map[string][]string // local address -> peers
}

// The metadata address is the same in every run: only one fake network at
// a time on this machine may route it. Runs of this package in other
// processes wait on this lock.
const fakeNetLock = "/run/lock/rarecloud-isolation-fakenet.lock"

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func newFakeNet(t *testing.T) *fakeNet {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("ip (iproute2) is missing: run `make setup` (it installs iproute2): %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("the fake-internet test makes a network namespace and routes: run it as root (as `make test` does)")
	}
	lockFakeNet(t)

	id := randomHex(4)
	var xy [2]byte
	if _, err := rand.Read(xy[:]); err != nil {
		t.Fatal(err)
	}
	x, y := 1+int(xy[0])%250, 1+int(xy[1])%250
	f := &fakeNet{
		ns: "rcx-" + id, hostIf: "rcxh" + id, nsIf: "rcxn" + id,
		hostAddr: fmt.Sprintf("10.99.%d.254", x),
		private:  fmt.Sprintf("10.99.%d.1", x),
		meta:     "169.254.169.254",
		public:   fmt.Sprintf("198.51.100.%d", y),
		token:    "fakenet-" + randomHex(8),
		seen:     map[string][]string{},
	}
	// None of the addresses may be routed specifically already: that would
	// be someone else's (or a real) host.
	for _, a := range []string{f.private, f.meta, f.public} {
		if out, _ := exec.Command("ip", "-4", "route", "show", a+"/32").Output(); strings.TrimSpace(string(out)) != "" {
			t.Fatalf("%s is already routed on this machine (%s): refusing to shadow it", a, strings.TrimSpace(string(out)))
		}
	}
	t.Cleanup(func() {
		if f.ln != nil {
			f.ln.Close()
		}
		// Deleting the namespace deletes its end of the veth, the pair, and
		// with it the host routes through it.
		if err := ipCmd("netns", "del", f.ns); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		_ = exec.Command("ip", "link", "del", f.hostIf).Run()
		for _, a := range []string{f.private, f.meta, f.public} {
			if out, _ := exec.Command("ip", "-4", "route", "show", a+"/32").Output(); strings.TrimSpace(string(out)) != "" {
				t.Errorf("cleanup: route to %s left behind: %s", a, out)
			}
		}
	})
	steps := [][]string{
		{"netns", "add", f.ns},
		{"link", "add", f.hostIf, "type", "veth", "peer", "name", f.nsIf},
		{"link", "set", f.nsIf, "netns", f.ns},
		{"addr", "add", f.hostAddr + "/32", "dev", f.hostIf},
		{"link", "set", f.hostIf, "up"},
		{"-n", f.ns, "link", "set", "lo", "up"},
		{"-n", f.ns, "addr", "add", f.private + "/32", "dev", f.nsIf},
		{"-n", f.ns, "addr", "add", f.meta + "/32", "dev", f.nsIf},
		{"-n", f.ns, "addr", "add", f.public + "/32", "dev", f.nsIf},
		{"-n", f.ns, "link", "set", f.nsIf, "up"},
		{"-n", f.ns, "route", "add", f.hostAddr + "/32", "dev", f.nsIf},
		{"-n", f.ns, "route", "add", "default", "via", f.hostAddr, "dev", f.nsIf},
		{"route", "add", f.private + "/32", "dev", f.hostIf},
		{"route", "add", f.meta + "/32", "dev", f.hostIf},
		{"route", "add", f.public + "/32", "dev", f.hostIf},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			t.Fatal(err)
		}
	}
	// The guard: every address the tests use routes into the namespace.
	for _, a := range []string{f.private, f.meta, f.public} {
		out, err := exec.Command("ip", "-4", "route", "get", a).Output()
		if err != nil || !strings.Contains(string(out), "dev "+f.hostIf+" ") {
			t.Fatalf("route to %s does not go into the fake network: %q %v", a, out, err)
		}
	}

	// A server in the namespace on every address: it greets with the run's
	// token and the address it was reached on, and records the peer.
	err := f.inNS(func() error {
		var err error
		f.ln, err = net.Listen("tcp4", "0.0.0.0:0")
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", f.ns, err)
	}
	go func() {
		for {
			conn, err := f.ln.Accept()
			if err != nil {
				return
			}
			local := conn.LocalAddr().(*net.TCPAddr).IP.String() //nolint:forcetypeassert // tcp4
			f.mu.Lock()
			f.seen[local] = append(f.seen[local], conn.RemoteAddr().String())
			f.mu.Unlock()
			_, _ = fmt.Fprintf(conn, "%s %s\n", f.token, local)
			conn.Close()
		}
	}()
	return f
}

func (f *fakeNet) port() int { return f.ln.Addr().(*net.TCPAddr).Port } //nolint:forcetypeassert // tcp4

func (f *fakeNet) addr(ip string) string { return net.JoinHostPort(ip, fmt.Sprint(f.port())) }

// peers lists who reached the server on one of its addresses.
func (f *fakeNet) peers(ip string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen[ip]...)
}

// inNS runs fn on an OS thread that has entered the namespace; sockets
// made there stay in it.
func (f *fakeNet) inNS(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + f.ns)
		if err != nil {
			goruntime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := setns(target.Fd()); err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", f.ns, err)
			return
		}
		ferr := fn()
		if err := setns(orig.Fd()); err != nil {
			// The thread stays locked and ends with this goroutine: it
			// never runs anything else in the wrong namespace.
			errc <- errors.Join(ferr, fmt.Errorf("setns back: %w", err))
			return
		}
		goruntime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setns(fd uintptr) error { return unix.Setns(int(fd), unix.CLONE_NEWNET) }

func lockFakeNet(t *testing.T) {
	t.Helper()
	lf, err := os.OpenFile(fakeNetLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			lf.Close()
			t.Fatalf("lock %s: %v", fakeNetLock, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Cleanup(func() { lf.Close() }) // closing releases the lock
}

// TestEgress: outbound from a sandbox reaches a public-looking host (through
// NAT), but not a private address, the cloud metadata address or loopback,
// all of which the host itself reaches; and nothing from the fake internet
// can connect into the sandbox.
func TestEgress(t *testing.T) {
	t.Parallel()
	c := backend(t)
	f := newFakeNet(t)
	sb := c.Running(tokA, map[string]any{"template": "python"}).ID
	ip := sandboxIP(t, c, sb)

	// Control: the host reaches the server on all three addresses.
	for _, a := range []string{f.private, f.meta, f.public} {
		g, err := dialFromHost(f.addr(a))
		if err != nil || g != f.token+" "+a+"\n" {
			t.Fatalf("control: host to %s: %q %v", f.addr(a), g, err)
		}
	}

	res := probe(t, c, sb, f.addr(f.public), f.addr(f.private), f.addr(f.meta), "127.0.0.1:"+fmt.Sprint(f.port()))
	pub := res[f.addr(f.public)]
	if !pub.Connected || pub.Data != f.token+" "+f.public+"\n" {
		t.Fatalf("sandbox to the public host %s: %+v", f.addr(f.public), pub)
	}
	t.Logf("%-22s reached after %4d ms: %q", pub.Addr, pub.Ms, pub.Data)
	delete(res, f.addr(f.public))
	wantBlocked(t, res, true)

	// The server saw exactly: the host's controls, and the sandbox on the
	// public address only, masqueraded behind the host's address.
	if p := f.peers(f.private); len(p) != 1 {
		t.Errorf("private address reached by %v, want the host's control only", p)
	}
	if p := f.peers(f.meta); len(p) != 1 {
		t.Errorf("metadata address reached by %v, want the host's control only", p)
	}
	p := f.peers(f.public)
	if len(p) != 2 {
		t.Fatalf("public address reached by %v, want the host's control and the sandbox", p)
	}
	if host, _, _ := net.SplitHostPort(p[1]); host != f.hostAddr {
		t.Errorf("the sandbox reached the public host from %s, want the host's NAT address %s", p[1], f.hostAddr)
	}

	// Inbound: from the fake internet (routed through the host) to a
	// listener in the sandbox, which answers on its own address.
	marker := "inbound-" + randomHex(6)
	const port = 8766
	startListener(t, c, sb, port, marker)
	self := probe(t, c, sb, fmt.Sprintf("%s:%d", ip, port))
	if r := self[fmt.Sprintf("%s:%d", ip, port)]; !r.Connected || !strings.Contains(r.Data, marker) {
		t.Fatalf("the sandbox's listener does not answer inside: %+v", r)
	}
	var dialErr error
	var greeting string
	t0 := time.Now()
	if err := f.inNS(func() error {
		greeting, dialErr = dialFromHost(net.JoinHostPort(ip, fmt.Sprint(port)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if dialErr == nil {
		t.Fatalf("the fake internet connected into the sandbox and got %q", greeting)
	}
	t.Logf("fake internet to %s:%d: %v after %v", ip, port, dialErr, time.Since(t0).Round(time.Millisecond))
	if peers := acceptedPeers(t, c, sb); len(peers) != 1 || peers[0] != ip {
		t.Fatalf("the sandbox's listener accepted %v, want only its own probe", peers)
	}
}
