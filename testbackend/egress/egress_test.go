package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

func TestAllows(t *testing.T) {
	list := []string{"api.example.com", "*.cdn.example.net"}
	for name, want := range map[string]bool{
		"api.example.com.":       true,
		"API.Example.COM.":       true,
		"api.example.com":        true,
		"example.com.":           false,
		"x.api.example.com.":     false,
		"a.cdn.example.net.":     true,
		"a.b.cdn.example.net.":   true,
		"cdn.example.net.":       false,
		"evilcdn.example.net.":   false,
		"cdn.example.net.evil.":  false,
		"api.example.com.evil.":  false,
		"xapi.example.com.":      false,
		"a.cdn.example.net.org.": false,
	} {
		if got := allows(list, name); got != want {
			t.Errorf("allows(%q) = %v, want %v", name, got, want)
		}
	}
}

// fakeUpstream serves fixed answers and records the names it is asked.
type fakeUpstream struct {
	addr  string
	mu    sync.Mutex
	asked []string
}

func startUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{}
	// A free UDP port may be taken for TCP: try another, as the forwarder
	// does (startForwarder).
	var pc net.PacketConn
	var ln net.Listener
	for attempt := 0; ; attempt++ {
		var err error
		if pc, err = net.ListenPacket("udp4", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		u.addr = pc.LocalAddr().String()
		if ln, err = net.Listen("tcp4", u.addr); err == nil {
			break
		}
		pc.Close()
		if attempt == 20 {
			t.Fatal(err)
		}
	}
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		u.mu.Lock()
		u.asked = append(u.asked, q.Name)
		u.mu.Unlock()
		switch q.Name {
		case "mixed.example.com.":
			if q.Qtype == dns.TypeA {
				m.Answer = []dns.RR{
					rr("mixed.example.com. 0 IN CNAME edge.example.org."),
					rr("edge.example.org. 30 IN A 198.51.100.7"),
					rr("edge.example.org. 999999 IN A 203.0.113.9"),
					rr("edge.example.org. 0 IN A 198.51.100.8"),
					rr("edge.example.org. 30 IN A 10.1.2.3"),
					rr("edge.example.org. 30 IN A 169.254.169.254"),
					rr("edge.example.org. 30 IN A 127.0.0.1"),
					rr("edge.example.org. 30 IN A 172.30.99.20"),
					rr("edge.example.org. 30 IN A 192.0.2.1"),
				}
				m.Extra = []dns.RR{rr("other.example.org. 30 IN A 198.51.100.99")}
			} else {
				m.Answer = []dns.RR{rr("mixed.example.com. 30 IN AAAA 2001:db8::1")}
			}
		case "flood.example.com.", "victim.example.com.":
			m.Answer = []dns.RR{rr(q.Name + " 30 IN A 198.51.100.20")}
		default:
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: ln, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return u
}

// startUnit starts a controller whose forwarder listens on 127.0.0.1 and
// whose sandbox network is a range nothing uses; cfg gives the rest (the
// tests then replace c.run, so their rules stay text).
func startUnit(t *testing.T, cfg Config) *Controller {
	t.Helper()
	cfg.Table, cfg.Bridge = "rarecloud_egress_unit", "lo"
	cfg.Gateway, cfg.Subnet = netip.MustParseAddr("127.0.0.1"), netip.MustParsePrefix("172.30.99.0/24")
	cfg.Used = func(context.Context) ([]netip.Addr, error) { return nil, nil }
	c, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestForwarder: the forwarder answers by the asker's policy: allowed
// names are forwarded with blocked, AAAA and extra records removed and TTLs
// capped, and their addresses enter the sandbox's set (with the TTL, at
// least MinTTL) before the answer; other names NXDOMAIN without a word
// upstream; DENY_ALL and unknown askers REFUSED. No kernel is touched: the
// nft scripts are captured.
func TestForwarder(t *testing.T) {
	up := startUpstream(t)
	c := startUnit(t, Config{Upstream: up.addr, Blocked: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	var mu sync.Mutex
	var scripts []string
	c.run = func(_ context.Context, s string) error {
		mu.Lock()
		defer mu.Unlock()
		scripts = append(scripts, s)
		return nil
	}
	ctx := context.Background()
	// The asker is 127.0.0.1 (the test itself).
	if err := c.Apply(ctx, sandbox.EgressPolicy{SandboxID: "sbx-a", IP: "127.0.0.1", Mode: ModeAllowList, Allowlist: []string{"MIXED.example.com."}}); err != nil {
		t.Fatal(err)
	}
	ask := func(name string, qtype uint16, netw string) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		cl := &dns.Client{Net: netw, Timeout: 5 * time.Second}
		r, _, err := cl.Exchange(m, net.JoinHostPort("127.0.0.1", itoa(c.Port())))
		if err != nil {
			t.Fatalf("%s %s over %s: %v", name, dns.TypeToString[qtype], netw, err)
		}
		return r
	}
	for _, netw := range []string{"udp", "tcp"} {
		// A fresh policy: the set holds nothing yet, so the answer's
		// addresses are loaded again.
		if err := c.Apply(ctx, sandbox.EgressPolicy{SandboxID: "sbx-a", IP: "127.0.0.1", Mode: ModeAllowList, Allowlist: []string{"MIXED.example.com."}}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		scripts = nil
		mu.Unlock()
		r := ask("mixed.example.com.", dns.TypeA, netw)
		var got []string
		for _, rr := range r.Answer {
			got = append(got, rr.String())
			if rr.Header().Ttl > uint32(MaxTTL/time.Second) {
				t.Errorf("TTL not capped: %s", rr)
			}
		}
		want := []string{"CNAME\tedge.example.org.", "A\t198.51.100.7", "A\t203.0.113.9", "A\t198.51.100.8"}
		if r.Rcode != dns.RcodeSuccess || len(got) != len(want) || len(r.Extra) != 0 {
			t.Fatalf("%s: answer %v extra %v, want %v only", netw, got, r.Extra, want)
		}
		for i, w := range want {
			if !strings.Contains(got[i], w) {
				t.Fatalf("%s: answer %d is %q, want %q", netw, i, got[i], w)
			}
		}
		mu.Lock()
		all := strings.Join(scripts, "")
		mu.Unlock()
		// The TTL, capped at MaxTTL, at least MinTTL.
		for _, w := range []string{"127.0.0.1 . 198.51.100.7 timeout 30s", "127.0.0.1 . 203.0.113.9 timeout 3600s", "127.0.0.1 . 198.51.100.8 timeout 5s"} {
			if !strings.Contains(all, w) {
				t.Fatalf("%s: nft scripts lack %q:\n%s", netw, w, all)
			}
		}
		for _, bad := range []string{"10.1.2.3", "169.254", "127.0.0.1 . 127.0.0.1", "172.30.99.20", "192.0.2.1", "198.51.100.99"} {
			if strings.Contains(all, " . "+bad) {
				t.Fatalf("%s: a blocked or unasked address entered the set (%s):\n%s", netw, bad, all)
			}
		}
		if aaaa := ask("mixed.example.com.", dns.TypeAAAA, netw); len(aaaa.Answer) != 0 {
			t.Fatalf("AAAA answered: %v", aaaa.Answer)
		}
	}
	if r := ask("edge.example.org.", dns.TypeA, "udp"); r.Rcode != dns.RcodeNameError {
		t.Fatalf("a name not on the list: rcode %s", dns.RcodeToString[r.Rcode])
	}
	up.mu.Lock()
	asked := append([]string(nil), up.asked...)
	up.mu.Unlock()
	for _, n := range asked {
		if n != "mixed.example.com." && n != "MIXED.example.com." {
			t.Fatalf("the forwarder asked upstream for %q", n)
		}
	}
	if err := c.Apply(ctx, sandbox.EgressPolicy{SandboxID: "sbx-a", IP: "127.0.0.1", Mode: ModeDenyAll}); err != nil {
		t.Fatal(err)
	}
	if r := ask("mixed.example.com.", dns.TypeA, "udp"); r.Rcode != dns.RcodeRefused {
		t.Fatalf("DENY_ALL asker: rcode %s", dns.RcodeToString[r.Rcode])
	}
	if err := c.Release(ctx, "sbx-a"); err != nil {
		t.Fatal(err)
	}
	if r := ask("mixed.example.com.", dns.TypeA, "udp"); r.Rcode != dns.RcodeRefused {
		t.Fatalf("unknown asker: rcode %s", dns.RcodeToString[r.Rcode])
	}
}

// TestRuleset: the table the controller writes is valid nft (checked by
// nft itself, without changing anything), when nft is installed. nft -c
// still needs CAP_NET_ADMIN to read the kernel's cache, so without root
// it runs in a user and network namespace of its own, where it has that
// capability over an empty ruleset: make check needs no root.
func TestRuleset(t *testing.T) {
	nft, err := findNft()
	if err != nil {
		t.Skip(err.Error() + " (make setup installs nftables); the isolation tests load the real ruleset")
	}
	c := &Controller{cfg: Config{Table: "rarecloud_egress_check", Bridge: "rcsbx0", Gateway: netip.MustParseAddr("172.30.99.1")}, port: 5399}
	script := c.ruleset([]netip.Addr{netip.MustParseAddr("172.30.99.200")}, []netip.Addr{netip.MustParseAddr("172.30.99.201"), netip.MustParseAddr("172.30.99.202")})
	cmd := exec.Command(nft, "-c", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if os.Geteuid() != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil && os.Geteuid() != 0 {
		// The namespaces could not be made (unprivileged user namespaces
		// are off): nft -c cannot run at all without root.
		t.Skipf("nft -c needs CAP_NET_ADMIN: not root, and no user namespace for it (%v)", err)
	}
	if err != nil {
		t.Fatalf("nft -c: %v: %s\n%s", err, out, script)
	}
}

// findNft is nft on PATH, else in the sbin directories a non-root PATH
// often lacks.
func findNft() (string, error) {
	if p, err := exec.LookPath("nft"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/nft", "/sbin/nft"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("nft is not on PATH, nor in /usr/sbin or /sbin")
}

// TestReserveIP: addresses come from the upper half, never the gateway,
// the broadcast, one in use, one reserved or one to avoid.
func TestReserveIP(t *testing.T) {
	used := []netip.Addr{}
	for i := 128; i <= 254; i++ {
		if i != 200 && i != 201 && i != 202 {
			used = append(used, netip.AddrFrom4([4]byte{172, 30, 99, byte(i)}))
		}
	}
	c := &Controller{
		cfg: Config{Gateway: netip.MustParseAddr("172.30.99.1"), Subnet: netip.MustParsePrefix("172.30.99.0/24"),
			Used: func(context.Context) ([]netip.Addr, error) { return used, nil }},
		byIP: map[netip.Addr]*entry{}, reserved: map[netip.Addr]time.Time{},
	}
	a, err := c.ReserveIP(context.Background(), []string{"172.30.99.200"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.ReserveIP(context.Background(), []string{"172.30.99.200"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{a: true, b: true}
	if !got["172.30.99.201"] || !got["172.30.99.202"] {
		t.Fatalf("reserved %s and %s, want .201 and .202", a, b)
	}
	if _, err := c.ReserveIP(context.Background(), []string{"172.30.99.200"}); err == nil {
		t.Fatal("a full upper half still gave an address")
	}
}

// TestReserveIPOutsideTheEngineRange: with the engine's range known, an
// address comes from anywhere outside it (the pool the backend leases to
// every sandbox, 191 addresses on setup's /24), the lower half included,
// and never from the range itself.
func TestReserveIPOutsideTheEngineRange(t *testing.T) {
	used := []netip.Addr{}
	for i := 64; i <= 254; i++ {
		if i != 70 {
			used = append(used, netip.AddrFrom4([4]byte{172, 30, 99, byte(i)}))
		}
	}
	c := &Controller{
		cfg: Config{Gateway: netip.MustParseAddr("172.30.99.1"), Subnet: netip.MustParsePrefix("172.30.99.0/24"),
			EngineRange: netip.MustParsePrefix("172.30.99.0/26"),
			Used:        func(context.Context) ([]netip.Addr, error) { return used, nil }},
		byIP: map[netip.Addr]*entry{}, reserved: map[netip.Addr]time.Time{},
	}
	a, err := c.ReserveIP(context.Background(), nil)
	if err != nil || a != "172.30.99.70" {
		t.Fatalf("reserved %q (%v), want the one free address outside the engine's range, .70", a, err)
	}
	if b, err := c.ReserveIP(context.Background(), nil); err == nil {
		t.Fatalf("with every address outside the engine's range taken, reserved %s", b)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// count is how often the upstream was asked for name.
func (u *fakeUpstream) count(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, a := range u.asked {
		if a == name {
			n++
		}
	}
	return n
}

// TestForwarderBoundsAFlood: one sandbox sends queries for its allowed
// name as fast as four sockets can, without waiting for answers; another
// sandbox's lookups meanwhile are all answered, the flooder's queries
// reach the upstream no faster than its rate (plus its burst), and its
// repeated answers load its set once instead of once per query. The two
// sandboxes are two loopback addresses (the forwarder knows askers by
// their source address).
func TestForwarderBoundsAFlood(t *testing.T) {
	up := startUpstream(t)
	lim := Limits{Rate: 20, Burst: 20, InFlight: 4, Upstream: 8}
	c := startUnit(t, Config{Upstream: up.addr, Limits: lim})
	var mu sync.Mutex
	loads := map[string]int{}
	c.run = func(_ context.Context, s string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
			if strings.Contains(s, "{ "+src+" . ") {
				loads[src]++
			}
		}
		return nil
	}
	ctx := context.Background()
	for ip, name := range map[string]string{"127.0.0.2": "flood.example.com", "127.0.0.3": "victim.example.com"} {
		if err := c.Apply(ctx, sandbox.EgressPolicy{SandboxID: "sbx-" + ip, IP: ip, Mode: ModeAllowList, Allowlist: []string{name}}); err != nil {
			t.Fatal(err)
		}
	}
	server := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: c.Port()}

	q := new(dns.Msg)
	q.SetQuestion("flood.example.com.", dns.TypeA)
	packet, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var sent atomic.Int64
	var flooders sync.WaitGroup
	start := time.Now()
	for range 4 {
		conn, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)}, server)
		if err != nil {
			t.Fatal(err)
		}
		flooders.Add(1)
		go func() {
			defer flooders.Done()
			defer conn.Close()
			// Bounded in count and in time.
			for i := 0; i < 200000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := conn.Write(packet); err == nil {
					sent.Add(1)
				}
			}
		}()
	}
	// The other sandbox's lookups are measured once the flood is under
	// way, however fast the machine runs them.
	for deadline := time.Now().Add(time.Minute); sent.Load() < 1000; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the flood sent only %d queries in a minute: it proves nothing", sent.Load())
		}
	}
	// The other sandbox asks as a resolver does: a query lost in a full
	// socket queue is asked again. Here nothing in the kernel drops the
	// flood before the forwarder's socket (the table's dnsguard chain does
	// that on the sandbox network), so the in-process flood can overflow
	// its queue, and how often depends on how much CPU the forwarder gets
	// beside four flooders: a lookup is lost only when no attempt is
	// answered within lookupBudget, however slow the machine.
	const lookupBudget = 20 * time.Second
	victim := &dns.Client{Net: "udp", Timeout: time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)}}}
	lost, attempts := 0, 0
	for range 30 {
		m := new(dns.Msg)
		m.SetQuestion("victim.example.com.", dns.TypeA)
		answered := false
		for deadline := time.Now().Add(lookupBudget); !answered && time.Now().Before(deadline); {
			attempts++
			r, _, err := victim.Exchange(m, server.String())
			answered = err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) == 1
		}
		if !answered {
			lost++
		}
	}
	t.Logf("30 lookups beside the flood took %d attempts", attempts)
	close(stop)
	flooders.Wait()
	elapsed := time.Since(start)

	if lost > 0 {
		t.Errorf("%d of 30 lookups of the other sandbox were lost during the flood", lost)
	}
	// Allow for the clock: what the bucket can have given out by the time
	// the last packet was admitted, and a little more.
	most := lim.Burst + int(lim.Rate*(elapsed.Seconds()+1))
	if n := up.count("flood.example.com."); n > most || n == 0 {
		t.Errorf("the flooder's %d queries reached the upstream %d times in %v, want 1 to %d (rate %v/s, burst %d)", sent.Load(), n, elapsed, most, lim.Rate, lim.Burst)
	}
	mu.Lock()
	defer mu.Unlock()
	if loads["127.0.0.2"] != 1 || loads["127.0.0.3"] != 1 {
		t.Errorf("answers loaded into the sets %v times, want once per sandbox (the same address with time to live left)", loads)
	}
}

// TestLoadedAnswerWaitsForNoNftRun: a lookup whose addresses the asker's
// set holds already is answered while another sandbox's nft run holds the
// table's lock (held here by the test), so one sandbox's updates never
// queue another's repeated lookups.
func TestLoadedAnswerWaitsForNoNftRun(t *testing.T) {
	up := startUpstream(t)
	c := startUnit(t, Config{Upstream: up.addr})
	var runs atomic.Int64
	c.run = func(context.Context, string) error { runs.Add(1); return nil }
	if err := c.Apply(context.Background(), sandbox.EgressPolicy{SandboxID: "sbx-v", IP: "127.0.0.3", Mode: ModeAllowList, Allowlist: []string{"victim.example.com"}}); err != nil {
		t.Fatal(err)
	}
	ask := func() error {
		m := new(dns.Msg)
		m.SetQuestion("victim.example.com.", dns.TypeA)
		// The bound only ends a lookup that waits for the lock: an answer
		// needs none of it (the name's TTL of 30 s keeps the address loaded
		// for 15 s, however slow the machine).
		cl := &dns.Client{Net: "udp", Timeout: 10 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3)}}}
		r, _, err := cl.Exchange(m, net.JoinHostPort("127.0.0.1", itoa(c.Port())))
		if err == nil && (r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1) {
			err = fmt.Errorf("rcode %s, answer %v", dns.RcodeToString[r.Rcode], r.Answer)
		}
		return err
	}
	before := runs.Load()
	if err := ask(); err != nil {
		t.Fatalf("the first lookup: %v", err)
	}
	if runs.Load() == before {
		t.Fatal("the first lookup loaded nothing: the test proves nothing")
	}
	c.nftMu.Lock()
	err := ask()
	c.nftMu.Unlock()
	if err != nil {
		t.Fatalf("a lookup of an address already loaded, while another nft run held the lock: %v", err)
	}
}
