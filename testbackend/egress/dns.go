package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/miekg/dns"
)

// The DNS forwarder of restricted sandboxes. Their queries to the
// gateway's port 53 are redirected here (nft.go), so the source address is
// the asking sandbox. It answers:
//   - REFUSED to a DENY_ALL sandbox (its DNS is rejected before it gets
//     here anyway) and to any address it has no policy for;
//   - NXDOMAIN for a name not on an ALLOW_LIST sandbox's list;
//   - for an allowed name, the upstream's answer with every address in a
//     private, loopback, link-local or reserved range removed (DNS
//     rebinding), every AAAA removed (sandboxes have no IPv6 egress), the
//     authority and additional sections dropped, and TTLs capped at
//     MaxTTL; the remaining addresses enter the sandbox's set (with the
//     TTL, at least MinTTL) before the answer leaves.

type forwarder struct {
	c    *Controller
	port int
	udp  *dns.Server
	tcp  *dns.Server
	// lim admits each query by its source (limit.go); upstream holds a
	// slot for every query waiting for the upstream resolver.
	lim      *limiter
	upstream chan struct{}
}

// startForwarder listens on the gateway, UDP and TCP on one free port.
func startForwarder(c *Controller) (*forwarder, error) {
	lim := c.cfg.Limits.withDefaults()
	f := &forwarder{c: c, lim: newLimiter(lim), upstream: make(chan struct{}, lim.Upstream)}
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(c.cfg.Gateway.String(), "0"))
		if err != nil {
			return nil, fmt.Errorf("egress: DNS forwarder: listen on %s: %w", c.cfg.Gateway, err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port //nolint:forcetypeassert // udp4
		ln, err := net.Listen("tcp4", net.JoinHostPort(c.cfg.Gateway.String(), strconv.Itoa(port)))
		if err != nil {
			pc.Close()
			lastErr = err
			continue
		}
		f.port = port
		f.udp = &dns.Server{PacketConn: pc, Handler: f, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
		f.tcp = &dns.Server{Listener: ln, Handler: f, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
		for _, s := range []*dns.Server{f.udp, f.tcp} {
			started := make(chan struct{})
			s.NotifyStartedFunc = func() { close(started) }
			go func() {
				if err := s.ActivateAndServe(); err != nil {
					c.cfg.Logger.Error("egress DNS forwarder stopped", "err", err)
				}
			}()
			<-started
		}
		return f, nil
	}
	return nil, fmt.Errorf("egress: DNS forwarder: no port free for both UDP and TCP: %w", lastErr)
}

func (f *forwarder) close() error {
	return errors.Join(f.udp.Shutdown(), f.tcp.Shutdown())
}

func (f *forwarder) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	src, err := netip.ParseAddrPort(w.RemoteAddr().String())
	if err != nil {
		_ = w.Close()
		return
	}
	ok, dropped := f.lim.admit(src.Addr().Unmap())
	if dropped > 0 {
		f.c.cfg.Logger.Warn("egress DNS: dropping the queries of a sandbox over its limits", "addr", src.Addr(), "dropped", dropped,
			"rate", f.lim.lim.Rate, "burst", f.lim.lim.Burst, "in_flight", f.lim.lim.InFlight)
	}
	if !ok {
		// No answer: a resolver over its limits is one that lost the
		// packet, and retries later. A TCP asker loses its connection.
		if _, isTCP := w.RemoteAddr().(*net.TCPAddr); isTCP {
			_ = w.Close()
		}
		return
	}
	defer f.lim.done(src.Addr().Unmap())
	start := time.Now()
	var ph phases
	reply := f.answer(w, r, &ph)
	if took := time.Since(start); took > slowAnswer {
		f.c.cfg.Logger.Warn("egress DNS: slow answer", "addr", src.Addr(), "took", took, "upstream", ph.upstream, "allow", ph.allow)
	}
	if err := w.WriteMsg(reply); err != nil {
		f.c.cfg.Logger.Debug("egress DNS: answer not sent", "err", err)
	}
}

// slowAnswer is how long an answer may take before it is logged with
// where the time went: far above a lookup's few milliseconds, well below
// the 5 s after which a resolver asks again.
const slowAnswer = time.Second

// phases is where an answer's time went: waiting for and talking to the
// upstream, and loading the answer's addresses.
type phases struct{ upstream, allow time.Duration }

func refuse(r *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	return m
}

func (f *forwarder) answer(w dns.ResponseWriter, r *dns.Msg, ph *phases) *dns.Msg {
	ap, err := netip.ParseAddrPort(w.RemoteAddr().String())
	if err != nil {
		return refuse(r, dns.RcodeRefused)
	}
	e := f.c.policyOf(ap.Addr())
	if e == nil || e.mode != ModeAllowList || r.Opcode != dns.OpcodeQuery || len(r.Question) != 1 {
		return refuse(r, dns.RcodeRefused)
	}
	q := r.Question[0]
	if q.Qclass != dns.ClassINET || !allows(e.allow, q.Name) {
		return refuse(r, dns.RcodeNameError)
	}
	netw := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		netw = "tcp"
	}
	t0 := time.Now()
	up := f.exchange(r, netw)
	ph.upstream = time.Since(t0)
	if up == nil {
		return refuse(r, dns.RcodeServerFailure)
	}
	out := new(dns.Msg)
	out.SetReply(r)
	out.Rcode = up.Rcode
	out.RecursionAvailable = up.RecursionAvailable
	addrs := map[netip.Addr]time.Duration{}
	for _, rr := range up.Answer {
		h := rr.Header()
		h.Ttl = min(h.Ttl, uint32(MaxTTL/time.Second))
		switch v := rr.(type) {
		case *dns.A:
			a, ok := netip.AddrFromSlice(v.A)
			if !ok || f.c.isBlocked(a) {
				f.c.cfg.Logger.Info("egress DNS: dropped an answer in a blocked range", "sandbox", e.id, "name", q.Name, "addr", v.A.String())
				continue
			}
			ttl := max(time.Duration(h.Ttl)*time.Second, MinTTL)
			addrs[a.Unmap()] = max(addrs[a.Unmap()], ttl)
		case *dns.AAAA:
			continue
		}
		out.Answer = append(out.Answer, rr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 = time.Now()
	err = f.c.allowAnswers(ctx, e.id, e.ip, addrs)
	ph.allow = time.Since(t0)
	if err != nil {
		f.c.cfg.Logger.Warn("egress DNS: could not allow the answer's addresses", "sandbox", e.id, "name", q.Name, "err", err)
		return refuse(r, dns.RcodeServerFailure)
	}
	return out
}

// exchange asks the upstream, over TCP when the UDP answer was truncated.
// At most Limits.Upstream queries wait for it at once; one that finds no
// slot within its timeout is answered SERVFAIL.
func (f *forwarder) exchange(r *dns.Msg, netw string) *dns.Msg {
	select {
	case f.upstream <- struct{}{}:
		defer func() { <-f.upstream }()
	case <-time.After(4 * time.Second):
		f.c.cfg.Logger.Warn("egress DNS: every upstream slot is busy", "slots", cap(f.upstream))
		return nil
	}
	q := r.Copy()
	for _, n := range []string{netw, "tcp"} {
		cl := &dns.Client{Net: n, Timeout: 4 * time.Second}
		resp, _, err := cl.Exchange(q, f.c.cfg.Upstream)
		if err != nil {
			f.c.cfg.Logger.Warn("egress DNS: upstream did not answer", "upstream", f.c.cfg.Upstream, "net", n, "err", err)
			return nil
		}
		if !resp.Truncated || n == "tcp" {
			return resp
		}
	}
	return nil
}
