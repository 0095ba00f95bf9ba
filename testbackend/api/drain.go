package api

import (
	"context"
	"io"
	"sync"

	"golang.org/x/time/rate"
)

// The rest of a body refused for an over-long number is read and dropped,
// so that a client still sending it reads the 422 instead of a reset
// connection. Reading it costs the backend's CPU and the kernel's, and a
// client that sends the next one as soon as it is answered made the
// backend read gigabytes a minute beside another account's commands
// (cmd/rarecloud-bench/results/README.md#hostile-neighbour). So what each
// account's refused bodies leave is dropped at DrainRate, shared by all
// of its requests: the client pays for an over-long body in time, not the
// host in CPU, and other accounts' drains do not wait for it.

// DrainRate is how many bytes a second of an account's refused bodies
// are read and dropped, drainBurst how many at once.
const (
	DrainRate  = 16 << 20
	drainBurst = 1 << 20
	drainChunk = 64 << 10
)

// drains holds each account's drain rate.
type drains struct {
	mu  sync.Mutex
	by  map[string]*rate.Limiter
	bps rate.Limit
}

func newDrains(bytesPerSecond int) *drains {
	return &drains{by: map[string]*rate.Limiter{}, bps: rate.Limit(bytesPerSecond)}
}

func (d *drains) limiter(account string) *rate.Limiter {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.by[account]
	if l == nil {
		l = rate.NewLimiter(d.bps, drainBurst)
		d.by[account] = l
	}
	return l
}

// drain reads r to its end at account's rate; it stops early when ctx
// ends or r fails (the body read timeout bounds a trickle).
func (d *drains) drain(ctx context.Context, account string, r io.Reader) {
	lim := d.limiter(account)
	buf := make([]byte, drainChunk)
	for {
		n, err := r.Read(buf)
		if n > 0 && lim.WaitN(ctx, n) != nil {
			return
		}
		if err != nil {
			return
		}
	}
}
