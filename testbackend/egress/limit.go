package egress

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// What one sandbox's DNS may cost. Every query is admitted or dropped
// before any work is done for it: a sandbox that floods its resolver
// spends its own tokens, holds at most InFlight queries at once, and
// costs the backend a dropped packet for each one more. Queries for names
// that resolve to addresses already allowed cost no nft run (allowAnswers).

// Limits bound the forwarder. Zero fields take the defaults.
type Limits struct {
	// Rate is the queries per second one sandbox address may send
	// (default 50), Burst how many it may send at once above that rate
	// (default 100): far above what a program's lookups need, far below
	// what a loop sends.
	Rate  float64
	Burst int
	// InFlight is how many of one sandbox's queries may be answered at
	// once (default 8); Upstream how many queries of all sandboxes may wait
	// for the upstream resolver at once (default 64), which bounds the
	// forwarder's sockets.
	InFlight int
	Upstream int
}

// DefaultLimits are the forwarder's bounds when Config.Limits is zero.
var DefaultLimits = Limits{Rate: 50, Burst: 100, InFlight: 8, Upstream: 64}

func (l Limits) withDefaults() Limits {
	if l.Rate <= 0 {
		l.Rate = DefaultLimits.Rate
	}
	if l.Burst <= 0 {
		l.Burst = DefaultLimits.Burst
	}
	if l.InFlight <= 0 {
		l.InFlight = DefaultLimits.InFlight
	}
	if l.Upstream <= 0 {
		l.Upstream = DefaultLimits.Upstream
	}
	return l
}

// maxSources bounds the limiter's table: past it, idle sources are
// forgotten (an idle source has a full bucket anyway).
const maxSources = 1024

// limiter admits queries per source address: a token bucket and a
// concurrency bound for each.
type limiter struct {
	lim Limits
	now func() time.Time

	mu  sync.Mutex
	src map[netip.Addr]*source
}

type source struct {
	bucket   *rate.Limiter
	last     time.Time
	inFlight int
	// dropped counts the queries refused since the last report.
	dropped  uint64
	reported time.Time
}

func newLimiter(l Limits) *limiter {
	return &limiter{lim: l.withDefaults(), now: time.Now, src: map[netip.Addr]*source{}}
}

// admit takes a token and an in-flight slot for a query from a; false
// means drop it. report is the number of drops to log now (at most once a
// minute per source), 0 for none.
func (l *limiter) admit(a netip.Addr) (ok bool, report uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	s := l.src[a]
	if s == nil {
		if len(l.src) >= maxSources {
			l.forgetIdleLocked(now)
		}
		s = &source{bucket: rate.NewLimiter(rate.Limit(l.lim.Rate), l.lim.Burst)}
		l.src[a] = s
	}
	s.last = now
	// A query over the in-flight bound is dropped without its token.
	if s.inFlight >= l.lim.InFlight || !s.bucket.AllowN(now, 1) {
		s.dropped++
		if now.Sub(s.reported) >= time.Minute {
			report, s.dropped, s.reported = s.dropped, 0, now
		}
		return false, report
	}
	s.inFlight++
	return true, 0
}

// done gives back the in-flight slot of an admitted query.
func (l *limiter) done(a netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.src[a]; s != nil && s.inFlight > 0 {
		s.inFlight--
	}
}

func (l *limiter) forgetIdleLocked(now time.Time) {
	for a, s := range l.src {
		if s.inFlight == 0 && now.Sub(s.last) > time.Minute {
			delete(l.src, a)
		}
	}
}
