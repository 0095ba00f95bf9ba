package sandbox

import (
	"time"
)

// How many warm containers a template keeps. At least Config.PoolSize; when
// creates arrive faster than one warm container starts, more: a container
// started at one claim is ready only a start time later, and the claims
// that arrive meanwhile must find containers already there. So the pool
// keeps PoolSize plus the claims expected during one start (the smoothed
// start time over the smoothed time between claims), up to PoolMax. After
// PoolIdle without a claim it goes back to PoolSize and removes the
// surplus, so a burst does not hold memory for good.

// DefaultPoolIdle is how long a pool keeps containers beyond PoolSize
// after the last claim.
const DefaultPoolIdle = 30 * time.Second

// poolSizing is one template's demand and start time, smoothed.
type poolSizing struct {
	lastClaim time.Time
	gap       time.Duration // between claims (0: fewer than two claims since the pool was idle)
	start     time.Duration // start and preparation of one warm container (0: none measured yet)
	trim      *time.Timer   // goes back to PoolSize after PoolIdle without a claim
}

// smooth weighs a new sample one quarter: a few claims move the estimate,
// one odd one does not.
func smooth(old, sample time.Duration) time.Duration {
	if old == 0 {
		return sample
	}
	return (3*old + sample) / 4
}

func (z *poolSizing) noteStart(took time.Duration) { z.start = smooth(z.start, took) }

// poolMax is the most warm containers one template keeps.
func (m *Manager) poolMax() int {
	if m.cfg.PoolMax > 0 {
		return max(m.cfg.PoolMax, m.cfg.PoolSize)
	}
	return 4 * m.cfg.PoolSize
}

// poolTargetLocked is how many warm containers the template's pool keeps now.
func (m *Manager) poolTargetLocked(p *warmPool) int {
	z := &p.sizing
	n := m.cfg.PoolSize
	if z.gap > 0 && z.start > 0 {
		n += int((z.start + z.gap - 1) / z.gap) // claims during one start, rounded up
	}
	return min(n, m.poolMax())
}

// noteDemandLocked records a request the template's pool could serve, and
// (re)arms the trim that follows the last one.
func (m *Manager) noteDemandLocked(template string, p *warmPool, now time.Time) {
	z := &p.sizing
	if !z.lastClaim.IsZero() {
		z.gap = smooth(z.gap, max(now.Sub(z.lastClaim), time.Millisecond))
	}
	z.lastClaim = now
	idle := m.cfg.PoolIdle
	if idle <= 0 {
		idle = DefaultPoolIdle
	}
	if z.trim != nil {
		z.trim.Stop()
	}
	z.trim = time.AfterFunc(idle, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.trimPoolLocked(template, idle)
	})
}

// trimPoolLocked takes an idle pool back to PoolSize: demand is forgotten
// and the containers beyond PoolSize are removed, oldest first.
func (m *Manager) trimPoolLocked(template string, idle time.Duration) {
	p := m.pools[template]
	if p == nil || time.Since(p.sizing.lastClaim) < idle || m.closing {
		return
	}
	p.sizing.gap, p.sizing.lastClaim, p.sizing.trim = 0, time.Time{}, nil
	for len(p.ready) > m.cfg.PoolSize {
		m.removeLaterLocked(p.ready[0])
		p.ready = p.ready[1:]
	}
	m.poolNotifyLocked()
}
