package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/hostnet"
)

// The forwarder that make setup runs answers this name itself (dnsmasq
// address=, under local=/internal/: *.internal never goes upstream). No test
// here asks any other resolver anything.
const (
	dnsCheckName = "rarecloud-dns-check.internal"
	dnsCheckAddr = "198.51.100.53"
	setupDNS     = "172.30.99.1"
)

// withNetworkFile points networkFile at a file with content for one test.
func withNetworkFile(t *testing.T, content string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "network.json")
	if content != "" {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := networkFile
	networkFile = path
	t.Cleanup(func() { networkFile = old })
}

// The unit tests below swap package variables: they do not run in parallel.

func TestSandboxDNS(t *testing.T) {
	withNetworkFile(t, `{"network": "rarecloud-sandbox", "bridge": "rcsbx0", "dns": "172.30.99.1"}`)
	for _, tc := range []struct {
		network  string
		explicit []string
		want     []string
	}{
		{DefaultNetwork, nil, []string{"172.30.99.1"}},
		{DefaultNetwork, []string{" 203.0.113.53", "2001:db8::53"}, []string{"203.0.113.53", "2001:db8::53"}},
		{"other-net", nil, nil},
		{"other-net", []string{"203.0.113.53"}, []string{"203.0.113.53"}},
		{NetworkNone, nil, nil},
		{NetworkNone, []string{"203.0.113.53"}, nil},
	} {
		got, err := sandboxDNS(tc.network, tc.explicit)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("sandboxDNS(%q, %q) = %q, %v; want %q", tc.network, tc.explicit, got, err, tc.want)
		}
	}
	if _, err := sandboxDNS(DefaultNetwork, []string{"dns.example"}); err == nil {
		t.Error("a host name as DNS server: no error")
	}

	withNetworkFile(t, `{"network": "rarecloud-sandbox", "bridge": "rcsbx0"}`) // before make setup ran a forwarder
	if got, err := sandboxDNS(DefaultNetwork, nil); got != nil || err != nil {
		t.Errorf("no dns in network.json: %q, %v", got, err)
	}
	withNetworkFile(t, "") // missing
	if got, err := sandboxDNS(DefaultNetwork, nil); got != nil || err != nil {
		t.Errorf("no network.json: %q, %v", got, err)
	}
	withNetworkFile(t, `{"network": `)
	if _, err := sandboxDNS(DefaultNetwork, nil); err == nil {
		t.Error("broken network.json: no error")
	}
	if _, err := sandboxDNS(NetworkNone, nil); err != nil {
		t.Errorf("broken network.json matters to network none: %v", err)
	}
	withNetworkFile(t, `{"network": "rarecloud-sandbox", "dns": "not-an-ip"}`)
	if _, err := sandboxDNS(DefaultNetwork, nil); err == nil {
		t.Error("a dns that is no address in network.json: no error")
	}
}

func TestWriteResolvConf(t *testing.T) {
	base := t.TempDir()
	shared := filepath.Join(base, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil { // whatever the umask
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(base, "own")
	old := resolvDirs
	// A missing parent, a directory others may write to and a symlink are
	// passed over.
	resolvDirs = []string{filepath.Join(base, "no", "such"), shared, link, own}
	t.Cleanup(func() { resolvDirs = old })

	p1, err := writeResolvConf([]string{"172.30.99.1"})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p1) != own {
		t.Fatalf("written to %s, want a file in %s", p1, own)
	}
	data, err := os.ReadFile(p1)
	if err != nil {
		t.Fatal(err)
	}
	want := "# RareCloud sandbox name servers (written by the backend).\nnameserver 172.30.99.1\noptions ndots:0\n"
	if string(data) != want {
		t.Fatalf("content %q, want %q", data, want)
	}
	if st, err := os.Stat(p1); err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("mode: %v, %v", st.Mode(), err)
	}
	// Same servers, same file; other servers, another file; nothing else left.
	if p, err := writeResolvConf([]string{"172.30.99.1"}); err != nil || p != p1 {
		t.Fatalf("second write: %s, %v (first %s)", p, err, p1)
	}
	p2, err := writeResolvConf([]string{"203.0.113.53", "203.0.113.54"})
	if err != nil || p2 == p1 {
		t.Fatalf("other servers: %s, %v", p2, err)
	}
	if data, _ := os.ReadFile(p2); !strings.Contains(string(data), "nameserver 203.0.113.53\nnameserver 203.0.113.54\n") {
		t.Fatalf("content %q", data)
	}
	if ents, _ := os.ReadDir(own); len(ents) != 2 {
		t.Fatalf("%d files in %s, want 2", len(ents), own)
	}
	for _, d := range []string{shared, link} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("wrote into %s", d)
		}
	}

	resolvDirs = []string{shared}
	if _, err := writeResolvConf([]string{"172.30.99.1"}); err == nil {
		t.Error("no usable directory: no error")
	}
}

// setupNetworkDNS is the forwarder address make setup recorded.
func setupNetworkDNS(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(networkFile)
	if err != nil {
		t.Fatalf("%v: run `make setup`", err)
	}
	var n hostnet.Network
	if err := json.Unmarshal(data, &n); err != nil {
		t.Fatal(err)
	}
	if n.DNS != setupDNS {
		t.Fatalf("%s says dns %q, want %q: run `make setup`", networkFile, n.DNS, setupDNS)
	}
	return n.DNS
}

// resolvMount reports the source of the container's /etc/resolv.conf
// bind mount, "" when it has none.
func resolvMount(t *testing.T, d *Runtime, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range info.Mounts {
		if m.Destination == resolvConfTarget {
			if m.RW {
				t.Errorf("%s is mounted read-write", resolvConfTarget)
			}
			return m.Source
		}
	}
	return ""
}

// pyDNSOverTCP asks one server one A question over TCP and prints
// "rcode answers address".
const pyDNSOverTCP = `
import socket, struct, sys
name, server = sys.argv[1], sys.argv[2]
q = struct.pack(">HHHHHH", 0x5253, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.create_connection((server, 53), timeout=5)
s.sendall(struct.pack(">H", len(q)) + q)
def recv(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            sys.exit("short answer")
        b += c
    return b
r = recv(struct.unpack(">H", recv(2))[0])
an = struct.unpack(">H", r[6:8])[0]
print(r[3] & 15, an, socket.inet_ntoa(r[-4:]) if an else "-")
`

// TestSandboxResolvesNames proves DNS on the setup's network end to end: the
// sandbox's resolv.conf names the forwarder on the gateway, names resolve
// through it over UDP and TCP, *.internal stays local, and the firewall still
// refuses every other port of the host.
func TestSandboxResolvesNames(t *testing.T) {
	t.Parallel()
	dns := setupNetworkDNS(t)
	d := requireEngine(t, Options{})
	spec := testSpec(t)
	spec.Image = pythonImage
	id := start(t, d, spec)

	if src := resolvMount(t, d, id); src == "" {
		t.Fatalf("no bind mount at %s", resolvConfTarget)
	}
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"cat", "/etc/resolv.conf"}})
	wantExit(t, res, 0)
	conf := string(res.Stdout)
	if !strings.Contains(conf, "\nnameserver "+dns+"\n") || !strings.Contains(conf, "options ndots:0\n") ||
		strings.Contains(conf, "127.0.0.11") || strings.Count(conf, "nameserver") != 1 {
		t.Fatalf("/etc/resolv.conf in the sandbox:\n%s", conf)
	}

	// The C library's resolver (UDP), as pip and npm use it.
	res = exec(t, d, id, container.ExecRequest{Cmd: []string{"python3", "-c", "import socket, sys; print(socket.gethostbyname(sys.argv[1]))", dnsCheckName}, Timeout: 20 * time.Second})
	wantExit(t, res, 0)
	if got := strings.TrimSpace(string(res.Stdout)); got != dnsCheckAddr {
		t.Fatalf("%s resolved to %q, want %s (stderr %q)", dnsCheckName, got, dnsCheckAddr, res.Stderr)
	}
	res = exec(t, d, id, container.ExecRequest{Cmd: []string{"getent", "hosts", dnsCheckName}, Timeout: 20 * time.Second})
	wantExit(t, res, 0)
	if f := strings.Fields(string(res.Stdout)); len(f) < 2 || f[0] != dnsCheckAddr || f[1] != dnsCheckName {
		t.Fatalf("getent hosts: %q", res.Stdout)
	}
	// TCP 53 (answers too large for UDP come this way).
	res = exec(t, d, id, container.ExecRequest{Cmd: []string{"python3", "-c", pyDNSOverTCP, dnsCheckName, dns}, Timeout: 20 * time.Second})
	wantExit(t, res, 0)
	if got := strings.TrimSpace(string(res.Stdout)); got != "0 1 "+dnsCheckAddr {
		t.Fatalf("over TCP: %q (stderr %q), want rcode 0, 1 answer, %s", got, res.Stderr, dnsCheckAddr)
	}
	// Other *.internal names are answered "no such name" by the forwarder
	// itself, at once (local=/internal/: never forwarded).
	res = exec(t, d, id, container.ExecRequest{Cmd: []string{"python3", "-c", pyDNSOverTCP, "no-such-name.internal", dns}, Timeout: 20 * time.Second})
	wantExit(t, res, 0)
	if got := strings.TrimSpace(string(res.Stdout)); got != "3 0 -" {
		t.Fatalf("no-such-name.internal: %q (stderr %q), want NXDOMAIN", got, res.Stderr)
	}

	// The accept is for port 53 of the gateway only: another port of the
	// host stays refused, fast.
	port, accepted := hostListener(t)
	res = exec(t, d, id, container.ExecRequest{
		Cmd:     []string{"python3", "-c", "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); print('CONNECTED')", dns, fmt.Sprint(port)},
		Timeout: 10 * time.Second,
	})
	if strings.Contains(string(res.Stdout), "CONNECTED") || res.TimedOut || res.ExitCode == nil || *res.ExitCode == 0 {
		t.Fatalf("sandbox reached %s:%d on the host (or hung): %+v", dns, port, res)
	}
	if !strings.Contains(string(res.Stderr), "refused") {
		t.Errorf("connect to %s:%d: %q, want a refusal", dns, port, res.Stderr)
	}
	select {
	case <-accepted:
		t.Fatal("host accepted a connection from the sandbox")
	default:
	}
}

// TestSandboxDNSOption: explicit servers replace the forwarder, in a
// resolv.conf of the runtime's (no lookup is made through them).
func TestSandboxDNSOption(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{DNS: []string{"203.0.113.53"}})
	id := start(t, d, testSpec(t))
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"cat", "/etc/resolv.conf"}})
	wantExit(t, res, 0)
	if conf := string(res.Stdout); !strings.Contains(conf, "\nnameserver 203.0.113.53\n") || strings.Count(conf, "nameserver") != 1 {
		t.Fatalf("/etc/resolv.conf:\n%s", conf)
	}
}

// TestNetworkNoneKeepsEngineResolvConf: sandboxes without a network get no
// resolv.conf of ours and no name servers.
func TestNetworkNoneKeepsEngineResolvConf(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{Network: NetworkNone})
	if d.dns != nil {
		t.Fatalf("name servers with network none: %q", d.dns)
	}
	id := start(t, d, testSpec(t))
	if src := resolvMount(t, d, id); strings.HasPrefix(filepath.Base(src), "resolv-") {
		t.Fatalf("network none got our resolv.conf (%s)", src)
	}
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"cat", "/etc/resolv.conf"}})
	if strings.Contains(string(res.Stdout), setupDNS) {
		t.Fatalf("network none names the forwarder:\n%s", res.Stdout)
	}
}
