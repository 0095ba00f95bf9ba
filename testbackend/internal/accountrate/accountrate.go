// Package accountrate keeps one byte rate per account: what a tenant's
// traffic of one kind may cost the host, shared by all of its requests
// of that kind and never by another account's.
package accountrate

import (
	"sync"

	"golang.org/x/time/rate"
)

// Limiters holds a token bucket per account, made on first use. The
// accounts are the tokens file's, so the map is bounded by it.
type Limiters struct {
	mu    sync.Mutex
	by    map[string]*rate.Limiter
	bps   rate.Limit
	burst int
}

// New returns limiters of bytesPerSecond each, burst bytes at once.
func New(bytesPerSecond, burst int) *Limiters {
	return &Limiters{by: map[string]*rate.Limiter{}, bps: rate.Limit(bytesPerSecond), burst: burst}
}

// For returns account's limiter.
func (l *Limiters) For(account string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.by[account]
	if lim == nil {
		lim = rate.NewLimiter(l.bps, l.burst)
		l.by[account] = lim
	}
	return lim
}
