package isolation

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
)

// The fake internet of the egress tests: a network namespace of the test's
// own behind a veth pair (as fakeNet), holding two public-looking hosts,
// one in 198.51.100.0/24 and one in 203.0.113.0/24, and a private host in
// 10.99.0.0/16, each greeting with the run's token and the address it was
// reached on; and a DNS server of the test's own on loopback, the upstream
// of the backend's egress forwarder, that serves names (under .example,
// reserved, never real) for those hosts and records every name it is
// asked. Nothing leaves the machine and no real name is ever resolved.
type egressNet struct {
	ns, hostIf, nsIf string
	hostAddr         string
	pubA, pubB, priv string

	token string
	ln    net.Listener

	dnsAddr string // host:port of the fake DNS server
	mu      sync.Mutex
	asked   []string
	records map[string]string // name (lower case, with dot) -> IPv4
}

// Names the fake DNS server answers.
const (
	nameA      = "allowed.egress-a.example" // -> pubA
	nameB      = "other.egress-b.example"   // -> pubB, on no list
	nameRebind = "rebind.egress-a.example"  // -> priv, on the list: DNS rebinding
	nameWild   = "x.wild.egress-b.example"  // -> pubB, under a wildcard
	wildEntry  = "*.wild.egress-b.example"  // the wildcard
	wildApex   = "wild.egress-b.example"    // -> pubB; the wildcard does not cover it
	nameTTL    = 60
)

func newEgressNet(t *testing.T) *egressNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the egress tests make a network namespace and routes: run them as root (as `make test` does)")
	}
	lockFakeNet(t)
	id := randomHex(4)
	var xyz [3]byte
	if _, err := rand.Read(xyz[:]); err != nil {
		t.Fatal(err)
	}
	x, y, z := 1+int(xyz[0])%250, 1+int(xyz[1])%250, 1+int(xyz[2])%250
	f := &egressNet{
		ns: "rce-" + id, hostIf: "rceh" + id, nsIf: "rcen" + id,
		hostAddr: fmt.Sprintf("10.98.%d.254", x),
		priv:     fmt.Sprintf("10.98.%d.1", x),
		pubA:     fmt.Sprintf("198.51.100.%d", y),
		pubB:     fmt.Sprintf("203.0.113.%d", z),
		token:    "egressnet-" + randomHex(8),
	}
	f.records = map[string]string{
		nameA + ".": f.pubA, nameB + ".": f.pubB, nameRebind + ".": f.priv,
		nameWild + ".": f.pubB, wildApex + ".": f.pubB,
	}
	hosts := []string{f.priv, f.pubA, f.pubB}
	for _, a := range hosts {
		if out, _ := exec.Command("ip", "-4", "route", "show", a+"/32").Output(); strings.TrimSpace(string(out)) != "" {
			t.Fatalf("%s is already routed on this machine (%s): refusing to shadow it", a, strings.TrimSpace(string(out)))
		}
	}
	t.Cleanup(func() {
		if f.ln != nil {
			f.ln.Close()
		}
		if err := ipCmd("netns", "del", f.ns); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		_ = exec.Command("ip", "link", "del", f.hostIf).Run()
	})
	steps := [][]string{
		{"netns", "add", f.ns},
		{"link", "add", f.hostIf, "type", "veth", "peer", "name", f.nsIf},
		{"link", "set", f.nsIf, "netns", f.ns},
		{"addr", "add", f.hostAddr + "/32", "dev", f.hostIf},
		{"link", "set", f.hostIf, "up"},
		{"-n", f.ns, "link", "set", "lo", "up"},
		{"-n", f.ns, "addr", "add", f.priv + "/32", "dev", f.nsIf},
		{"-n", f.ns, "addr", "add", f.pubA + "/32", "dev", f.nsIf},
		{"-n", f.ns, "addr", "add", f.pubB + "/32", "dev", f.nsIf},
		{"-n", f.ns, "link", "set", f.nsIf, "up"},
		{"-n", f.ns, "route", "add", f.hostAddr + "/32", "dev", f.nsIf},
		{"-n", f.ns, "route", "add", "default", "via", f.hostAddr, "dev", f.nsIf},
	}
	for _, a := range hosts {
		steps = append(steps, []string{"route", "add", a + "/32", "dev", f.hostIf})
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range hosts {
		out, err := exec.Command("ip", "-4", "route", "get", a).Output()
		if err != nil || !strings.Contains(string(out), "dev "+f.hostIf+" ") {
			t.Fatalf("route to %s does not go into the fake network: %q %v", a, out, err)
		}
	}
	fn := &fakeNet{ns: f.ns}
	if err := fn.inNS(func() error {
		var err error
		f.ln, err = net.Listen("tcp4", "0.0.0.0:0")
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", f.ns, err)
	}
	go func() {
		for {
			conn, err := f.ln.Accept()
			if err != nil {
				return
			}
			local := conn.LocalAddr().(*net.TCPAddr).IP.String() //nolint:forcetypeassert // tcp4
			_, _ = fmt.Fprintf(conn, "%s %s\n", f.token, local)
			conn.Close()
		}
	}()
	f.startDNS(t)
	return f
}

func (f *egressNet) port() int { return f.ln.Addr().(*net.TCPAddr).Port } //nolint:forcetypeassert // tcp4

func (f *egressNet) addr(ip string) string { return net.JoinHostPort(ip, fmt.Sprint(f.port())) }

// greeting is what the server says on ip.
func (f *egressNet) greeting(ip string) string { return f.token + " " + ip + "\n" }

// startDNS serves the records on 127.0.0.1 (UDP and TCP, one port).
func (f *egressNet) startDNS(t *testing.T) {
	t.Helper()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) == 1 {
			q := r.Question[0]
			name := strings.ToLower(q.Name)
			f.mu.Lock()
			f.asked = append(f.asked, name)
			f.mu.Unlock()
			ip, found := f.records[name]
			switch {
			case !found:
				m.Rcode = dns.RcodeNameError
			case q.Qtype == dns.TypeA:
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: nameTTL}, A: net.ParseIP(ip).To4()})
			}
		}
		_ = w.WriteMsg(m)
	})
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := pc.LocalAddr().(*net.UDPAddr).Port //nolint:forcetypeassert // udp4
	ln, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	f.dnsAddr = pc.LocalAddr().String()
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go func() { _ = s.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
}

// askedFor reports whether the fake DNS server was asked for name.
func (f *egressNet) askedFor(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.asked {
		if a == strings.ToLower(name)+"." {
			return true
		}
	}
	return false
}

// egressBackend starts a backend of the test's own with egress control
// on, its forwarder asking the fake DNS server; the data directory lets a
// test restart it.
func egressBackend(t *testing.T, dir string, f *egressNet) *testbackend.Backend {
	t.Helper()
	requireEngine(t)
	logf, err := os.OpenFile(filepath.Join(dir, "backend.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		logf.Close()
		if t.Failed() {
			logLines(t, filepath.Join(dir, "backend.log"), "egress")
		}
	})
	b, err := startBackend(filepath.Join(dir, "data"), testbackend.Config{
		HomeBytes: smallDisk, TmpBytes: smallDisk,
		EgressControl:     testbackend.EgressOn,
		EgressDNSUpstream: f.dnsAddr,
		Logger:            slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatalf("start backend with egress control on: %v", err)
	}
	return b
}

// logLines shows the lines of a backend's log that mention what, so that a
// failed test tells what the backend saw.
func logLines(t *testing.T, path, what string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Logf("backend log: %v", err)
		return
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, what) {
			if n++; n > 200 {
				t.Logf("backend log: more lines with %q left out", what)
				return
			}
			t.Logf("backend log: %s", line)
		}
	}
}

// nftTable lists a backend's egress table ("" when it does not exist).
func nftTable(t *testing.T, table string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nft", "list", "table", "inet", table).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No such file or directory") {
			return ""
		}
		t.Fatalf("nft list table inet %s: %v: %s", table, err, out)
	}
	return string(out)
}

// resolveScript resolves each name (IPv4) and connects to each address
// target, as JSON: {"resolve": {name: [addrs] or "error"}, "connect": ...}.
const resolveScript = `import json, socket, time
names, timeout = json.loads(%q), %v
out = {}
for n in names:
    t0 = time.monotonic()
    try:
        addrs = sorted({ai[4][0] for ai in socket.getaddrinfo(n, 80, socket.AF_INET, socket.SOCK_STREAM)})
        out[n] = {"addrs": addrs, "err": "", "ms": int((time.monotonic() - t0) * 1000)}
    except Exception as e:
        out[n] = {"addrs": [], "err": "%%s: %%s" %% (type(e).__name__, e), "ms": int((time.monotonic() - t0) * 1000)}
print(json.dumps(out))
`

type resolved struct {
	Addrs []string `json:"addrs"`
	Err   string   `json:"err"`
	Ms    int64    `json:"ms"`
}

// resolve resolves names inside a sandbox with the system resolver.
func resolve(t *testing.T, c *apiClient, id string, names ...string) map[string]resolved {
	t.Helper()
	list, err := json.Marshal(names)
	if err != nil {
		t.Fatal(err)
	}
	out := ok(t, "resolve", c.python(id, fmt.Sprintf(resolveScript, string(list), connectTimeout.Seconds()), 60000))
	var m map[string]resolved
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("resolve output %q: %v", out, err)
	}
	for _, n := range names {
		t.Logf("sandbox %s resolves %-28s -> %v %s (%d ms)", id, n, m[n].Addrs, m[n].Err, m[n].Ms)
	}
	return m
}
