package docker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/miekg/dns"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/registrytest"
)

// Every kind of address the backend does not pull from is blocked, and a
// public one is not.
func TestBlockedAddr(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "127.1.2.3", "::1", "10.0.0.1", "172.16.0.1", "192.168.1.1", "fd00::1",
		"169.254.169.254", "fe80::1", "100.64.0.1", "224.0.0.1", "ff02::1", "0.0.0.0", "::", "240.0.0.1",
		"255.255.255.255", "198.18.0.1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::1"} {
		if blockedAddr(netip.MustParseAddr(a)) == "" {
			t.Errorf("%s is not blocked", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"} {
		if why := blockedAddr(netip.MustParseAddr(a)); why != "" {
			t.Errorf("%s is blocked: %s", a, why)
		}
	}
}

// pullRuntime is a runtime on the test engine whose pulls are allowed from
// reg (and opts.AllowRegistries), with the images it pulled removed when
// the test ends.
func pullRuntime(t *testing.T, reg *registrytest.Registry, opts Options) *Runtime {
	t.Helper()
	opts.AllowRegistries = append([]string{reg.Host}, opts.AllowRegistries...)
	d := requireEngine(t, opts)
	t.Cleanup(func() {
		d.imgMu.Lock()
		var refs []string
		for _, p := range d.pulled {
			refs = append(refs, p.ref)
		}
		d.imgMu.Unlock()
		d.removeRefs(refs...)
	})
	return d
}

func present(t *testing.T, d *Runtime, ref string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := d.cli.ImageInspect(ctx, ref)
	return err == nil
}

func refusedRule(err error) string {
	var r *container.ImageRefusedError
	if errors.As(err, &r) {
		return r.Rule
	}
	return ""
}

// Ten concurrent ensures of one image that is not on the engine share one
// pull: the registry sees one manifest fetch by tag and one fetch of the
// config blob (both the backend's download; the engine fetches nothing).
func TestPullSharedByConcurrentCreates(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	img := registrytest.RandomImage(t, 256<<10, 1)
	ref := reg.Push(t, "team/shared:1", img)
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	d := pullRuntime(t, reg, Options{})
	before := reg.ManifestGETs("team/shared")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.EnsureImage(ctx, ref)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ensure %d: %v", i, err)
		}
	}
	byTag := reg.Count(func(q registrytest.Request) bool {
		return q.Method == "GET" && q.Path == "/v2/team/shared/manifests/1"
	})
	if byTag != 1 || reg.BlobGETs("team/shared", cfg) != 1 {
		t.Fatalf("10 concurrent ensures: %d manifest GETs by tag, %d config blob GETs (%d manifest GETs in all, %d before); want one pull", byTag, reg.BlobGETs("team/shared", cfg), reg.ManifestGETs("team/shared"), before)
	}
}

// An image over the unpacked limit is refused and not left on the engine;
// one over the compressed limit is refused before anything is pulled.
func TestPullRefusesTooLargeImage(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	img := registrytest.RandomImage(t, 2<<20, 1)
	ref := reg.Push(t, "team/big:1", img)
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	d := pullRuntime(t, reg, Options{MaxImageBytes: 1 << 20})
	err = d.EnsureImage(ctx, ref)
	if refusedRule(err) != container.RuleTooLarge || !strings.Contains(err.Error(), ref) {
		t.Fatalf("ensure over the unpacked limit: %v, want a %s refusal naming the image", err, container.RuleTooLarge)
	}
	d.imgMu.Lock()
	n := len(d.pulled)
	d.imgMu.Unlock()
	if present(t, d, ref) || n != 0 {
		t.Fatalf("a refused image is still on the engine (%v) or tracked (%d)", present(t, d, ref), n)
	}

	small := pullRuntime(t, reg, Options{MaxDownloadBytes: 1 << 20})
	pulls := reg.BlobGETs("team/big", cfg)
	err = small.EnsureImage(ctx, ref)
	if refusedRule(err) != container.RuleTooLarge {
		t.Fatalf("ensure over the compressed limit: %v, want %s", err, container.RuleTooLarge)
	}
	if got := reg.BlobGETs("team/big", cfg); got != pulls || present(t, d, ref) {
		t.Fatalf("an image over the compressed limit was downloaded (%d config GETs, was %d)", got, pulls)
	}
}

// Past the budget, the least recently used pulled image no container uses
// is removed; the image just pulled, and one that is a template's, stay.
func TestImageBudgetRemovesLeastRecentlyUsed(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	tpl := reg.Push(t, "team/tpl:1", registrytest.TemplateImage(t, testHost()))
	a := reg.Push(t, "team/a:1", registrytest.RandomImage(t, 1<<20, 1))
	b := reg.Push(t, "team/b:1", registrytest.RandomImage(t, 1<<20, 1))
	d := pullRuntime(t, reg, Options{ImageBudgetBytes: 3 << 19}) // 1.5 MiB: A and B do not fit together
	d.imageHold = 0
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, ref := range []string{tpl, a, b} {
		if err := d.EnsureImage(ctx, ref); err != nil {
			t.Fatalf("ensure %s: %v", ref, err)
		}
	}
	if present(t, d, a) {
		t.Errorf("%s is still there: the budget did not remove the least recently used image", a)
	}
	if !present(t, d, b) {
		t.Errorf("%s, just pulled, was removed", b)
	}
	if !present(t, d, tpl) || !present(t, d, baseImage) {
		t.Errorf("a template's image was removed: %s %v, %s %v", tpl, present(t, d, tpl), baseImage, present(t, d, baseImage))
	}
	// An image a container uses stays too, however old.
	if err := d.EnsureImage(ctx, a); err != nil {
		t.Fatal(err)
	}
	created, err := d.cli.ContainerCreate(ctx, &dockercontainer.Config{Image: a, Cmd: []string{"x"}}, nil, nil, nil, "rt-budget-"+randomID(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // before the images go (cleanups run last first)
		_ = d.cli.ContainerRemove(context.Background(), created.ID, dockercontainer.RemoveOptions{Force: true})
	})
	c := reg.Push(t, "team/c:1", registrytest.RandomImage(t, 1<<20, 1))
	if err := d.EnsureImage(ctx, c); err != nil {
		t.Fatal(err)
	}
	if !present(t, d, a) {
		t.Errorf("%s, used by a container, was removed", a)
	}
	if present(t, d, b) {
		t.Errorf("%s, unused and older, is still there", b)
	}
}

// An image gone between the create's ensure and the start (removed by the
// budget, or by hand) is pulled again by Start; when that pull fails,
// Start answers the backend's own pull refusal, which the sandbox's
// start_failed message carries, and nothing the registry said.
func TestStartPullsAgainAnImageGoneSinceEnsure(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, "team/again:1", registrytest.BaseImage(t, testHost()))
	d := pullRuntime(t, reg, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gone := func() {
		t.Helper()
		if err := d.EnsureImage(ctx, ref); err != nil {
			t.Fatal(err)
		}
		d.imgMu.Lock()
		p := *d.pulled[ref]
		d.imgMu.Unlock()
		d.removeRefs(p.ref)
		if present(t, d, ref) {
			t.Fatalf("%s still there after its removal", ref)
		}
	}
	gone()
	spec := testSpec(t)
	spec.Image = ref
	spec.Name = "rt-again-" + randomID(t)
	start(t, d, spec)
	if !present(t, d, ref) {
		t.Fatalf("Start ran without %s", ref)
	}
	if err := d.Remove(ctx, spec.Name); err != nil {
		t.Fatal(err)
	}

	gone()
	// The registry forgets the image: the second pull fails.
	regless := pullRuntime(t, registrytest.Start(t, registrytest.Options{}), Options{})
	spec2 := testSpec(t)
	spec2.Image = strings.Replace(ref, reg.Host, regless.registriesHost(), 1)
	spec2.Name = "rt-again-" + randomID(t)
	_, err := regless.Start(ctx, spec2)
	if refusedRule(err) != container.RulePull || !strings.Contains(err.Error(), spec2.Image) {
		t.Fatalf("start after a failed pull: %v, want the backend's own %s refusal naming the image", err, container.RulePull)
	}
	for _, leak := range []string{"http://", "MANIFEST_UNKNOWN", "manifest unknown", "Error response from daemon"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("start error %q carries %q", err, leak)
		}
	}
}

// registriesHost is the one registry a test runtime allows.
func (d *Runtime) registriesHost() string {
	for h := range d.registries.allow {
		return h
	}
	return ""
}

// Every address of this host's interfaces is blocked, whatever its range.
func TestBlockedAddrOwn(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, ia := range addrs {
		n, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		if blockedAddr(ip) == "" {
			t.Errorf("own address %s is not blocked", ip)
		}
	}
}

// What the engine or a registry says about credentials is the private
// answer; anything else the generic one; neither carries that text.
func TestRegistryErrSanitized(t *testing.T) {
	const ref = "registry.example/team/py:1"
	for text, rule := range map[string]string{
		`Head "http://127.0.0.1:5001/v2/team/py/manifests/1": no basic auth credentials`:                  container.RulePrivate,
		"unauthorized: authentication required":                                                           container.RulePrivate,
		"pull access denied for team/py, repository does not exist or may require 'docker login': denied": container.RulePrivate,
		`manifest for registry.example/team/py:1 not found: manifest unknown: manifest unknown`:           container.RulePull,
		`Get "https://registry.example/v2/": dial tcp 10.1.2.3:443: connect: connection refused`:          container.RulePull,
		`error pulling sha256:4019401abc: unexpected EOF`:                                                 container.RulePull,
	} {
		err := sanitizedErr(ref, errors.New(text))
		if refusedRule(err) != rule || !strings.Contains(err.Error(), ref) {
			t.Errorf("%q: %v, want a %s refusal naming the image", text, err, rule)
		}
		for _, leak := range []string{"http", "127.0.0.1", "10.1.2.3", "manifest unknown", "no basic auth", "EOF"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%q: the answer %q carries %q", text, err, leak)
			}
		}
	}
}

// A registry that hands blob downloads (307) to another host, as
// registries do with CDNs: the download connects there only when that
// host:port is itself allowed. Here the registry (127.0.0.1:PORT) is
// allowed and the mirror it redirects to (127.0.0.1:OTHER, a loopback
// address) is not: the ensure is refused with the backend's own words,
// the mirror accepted no connection, and nothing is on the engine. With
// the mirror allowed too, the pull goes through it.
func TestPullRefusesRedirectToBlockedAddress(t *testing.T) {
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, "team/cdn:1", registrytest.RandomImage(t, 64<<10, 1))
	mirror := reg.RedirectBlobs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	d := pullRuntime(t, reg, Options{})
	err := d.EnsureImage(ctx, ref)
	if rule := refusedRule(err); rule != container.RuleRegistry && rule != container.RulePull || !strings.Contains(err.Error(), ref) {
		t.Fatalf("ensure of an image whose blobs redirect to a blocked address: %v, want a %s or %s refusal naming the image", err, container.RuleRegistry, container.RulePull)
	}
	rest := registrytest.Unnamed(err.Error(), ref)
	_, mirrorPort, _ := strings.Cut(mirror.Host, ":")
	for _, leak := range []string{mirrorPort, "http://", "307", "Temporary Redirect", "Location"} {
		if strings.Contains(rest, leak) {
			t.Errorf("the refusal %q carries %q", err, leak)
		}
	}
	if n := mirror.Conns(); n != 0 {
		t.Fatalf("the redirect target on a blocked address accepted %d connections", n)
	}
	if present(t, d, ref) {
		t.Fatalf("%s is on the engine after a refused pull", ref)
	}

	allowed := pullRuntime(t, reg, Options{AllowRegistries: []string{mirror.Host}})
	if err := allowed.EnsureImage(ctx, ref); err != nil {
		t.Fatalf("ensure with the redirect target allowed too: %v", err)
	}
	if mirror.BlobGETs() == 0 || !present(t, allowed, ref) {
		t.Fatalf("with the redirect target allowed: %d blob GETs at it, present %v; want the pull through it", mirror.BlobGETs(), present(t, allowed, ref))
	}
}

// rebindingResolver is a resolver whose only server, on loopback and
// owned by the test, answers name's first A query with first and every
// later one with then (AAAA: no address; other names: NXDOMAIN).
func rebindingResolver(t *testing.T, qname string, first, then netip.Addr) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var aQueries atomic.Int64
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		switch {
		case !strings.EqualFold(q.Name, dns.Fqdn(qname)):
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			a := then
			if aQueries.Add(1) == 1 {
				a = first
			}
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: a.AsSlice()})
		}
		_ = w.WriteMsg(m)
	})
	srv := &dns.Server{PacketConn: pc, Handler: handler}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
}

// A registry name that resolves to a public address when the policy
// checks it and to loopback when the download connects (DNS rebinding) is
// refused at connect time: the registry on loopback accepts no
// connection. The control: the same name allowed, resolving to loopback
// both times, is pulled from that registry.
func TestPullRefusesRebindingName(t *testing.T) {
	const host = "rebind.rarecloud.test"
	reg := registrytest.Start(t, registrytest.Options{})
	_, port, _ := strings.Cut(reg.Host, ":")
	reg.Push(t, "team/rebind:1", registrytest.RandomImage(t, 64<<10, 1))
	ref := host + ":" + port + "/team/rebind:1"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	loopback := netip.MustParseAddr("127.0.0.1")

	d := requireEngine(t, Options{})
	d.registries.resolver = rebindingResolver(t, host, netip.MustParseAddr("1.2.3.4"), loopback)
	conns := reg.Conns()
	err := d.EnsureImage(ctx, ref)
	if got := reg.Conns() - conns; got != 0 {
		t.Fatalf("the registry on loopback accepted %d connections from a download the policy should have refused (ensure: %v)", got, err)
	}
	// The download's refusal, not the check's: the check saw 1.2.3.4.
	if refusedRule(err) != container.RuleRegistry || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), "downloading image") || !strings.Contains(err.Error(), "a loopback address") {
		t.Fatalf("ensure of a name that rebinds to loopback: %v, want the download's %s refusal naming the image and the rule", err, container.RuleRegistry)
	}

	allowed := pullRuntime(t, reg, Options{AllowRegistries: []string{host + ":" + port}})
	allowed.registries.resolver = rebindingResolver(t, host, loopback, loopback)
	if err := allowed.EnsureImage(ctx, ref); err != nil {
		t.Fatalf("ensure of the allowed name resolving to the registry: %v", err)
	}
	if reg.ManifestGETs("team/rebind") == 0 || !present(t, allowed, ref) {
		t.Fatalf("the allowed name was not pulled from the registry (%d manifest GETs)", reg.ManifestGETs("team/rebind"))
	}
}

// Without an engine: an allowed registry is exempt for its own host:port
// only, and a dial anywhere else to a blocked address is refused before
// any connection is made, recorded as the download's refusal.
func TestPullDialerPolicy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The listener's accepts in order, by the peer's address: the kernel
	// queues connections in the order they were made.
	var (
		mu       sync.Mutex
		accepted []string
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c.RemoteAddr().String())
			mu.Unlock()
			c.Close()
		}
	}()
	// acceptedUpTo waits until the connection from peer is accepted and
	// returns every accept so far.
	acceptedUpTo := func(peer string) []string {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			mu.Lock()
			got := slices.Clone(accepted)
			mu.Unlock()
			if slices.Contains(got, peer) {
				return got
			}
		}
		t.Fatalf("the connection from %s was never accepted", peer)
		return nil
	}
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	p, err := newRegistryPolicy([]string{ln.Addr().String(), "Registry.Example", "[::1]:5000"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host, port string
		want       bool
	}{
		{"127.0.0.1", strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:"), true},
		{"127.0.0.1", strings.TrimPrefix(other.Addr().String(), "127.0.0.1:"), false},
		{"registry.example", "443", true},
		{"REGISTRY.example", "80", true},
		{"registry.example", "5000", false},
		{"cdn.registry.example", "443", false},
		{"::1", "5000", true},
		{"::1", "5001", false},
	} {
		if got := p.allowedAddr(c.host, c.port); got != c.want {
			t.Errorf("allowedAddr(%s, %s) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
	ctx := context.Background()
	pd := &pullDialer{policy: p}
	conn, err := pd.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial of the allowed registry: %v", err)
	}
	first := acceptedUpTo(conn.LocalAddr().String())
	conn.Close()
	if _, err := pd.DialContext(ctx, "tcp", other.Addr().String()); !errors.Is(err, errBlockedDial) {
		t.Fatalf("dial of another loopback port: %v, want the policy's refusal", err)
	}
	if r := pd.refusal(); r == nil || r.why != "a loopback" {
		t.Fatalf("the refusal recorded is %+v, want a loopback one", r)
	}
	// The checking dialer itself refuses on the socket, whatever the name.
	if _, err := checkingDialer().DialContext(ctx, "tcp", ln.Addr().String()); !errors.Is(err, errBlockedDial) {
		t.Fatalf("checking dialer to loopback: %v, want the policy's refusal", err)
	}
	// A plain connection after it, the positive control: once it is
	// accepted, a connection the refused dial made would have been too.
	control, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer control.Close()
	if got := acceptedUpTo(control.LocalAddr().String()); len(got) != len(first)+1 {
		t.Fatalf("accepted %v: the checking dialer connected to a blocked address (want only the allowed dial and the control)", got)
	}
}

// Without an engine: a download that reads past its limit stops with
// errDownloadTooLarge, whatever the answer declared.
func TestDownloadByteCounter(t *testing.T) {
	count := &byteCounter{}
	count.limit.Store(64 << 10)
	c := &http.Client{Transport: &countingTransport{rt: http.DefaultTransport, count: count}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("x"), 1<<20))
	}))
	defer srv.Close()
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if !errors.Is(err, errDownloadTooLarge) || n > 64<<10+32<<10 {
		t.Fatalf("read %d bytes, then %v; want errDownloadTooLarge soon after 64 KiB", n, err)
	}
}
