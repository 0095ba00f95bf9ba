package sandbox

import (
	"context"
	"sync"
	"time"
)

// engineState tracks whether the engine answered recently.
type engineState struct {
	mu     sync.Mutex // guards the fields; never held across an engine call
	lastOK time.Time
	down   bool
	check  *engineCheck // the ping (and reconcile) in flight, if any
}

// engineCheck is one ping, and reconcile when needed, shared by every
// caller that arrives while it runs: done is closed once err is set.
type engineCheck struct {
	done chan struct{}
	err  error
}

// engineFresh is how long a successful ping vouches for the engine.
const engineFresh = time.Second

// EngineAvailable reports, with a SERVICE_UNAVAILABLE error naming the
// engine address, whether sandbox routes can be served. After the engine
// was away it reconciles first, so no caller sees a stale record. One
// check runs at a time, in the background; callers share its result and
// each waits only as long as its own ctx allows.
func (m *Manager) EngineAvailable(ctx context.Context) error {
	m.engine.mu.Lock()
	if !m.engine.down && !m.engine.lastOK.IsZero() && time.Since(m.engine.lastOK) < engineFresh {
		m.engine.mu.Unlock()
		return nil
	}
	c := m.engine.check
	leader := c == nil
	if leader {
		c = &engineCheck{done: make(chan struct{})}
		m.engine.check = c
	}
	m.engine.mu.Unlock()
	if leader {
		m.mu.Lock()
		started := m.goLocked(func() { m.checkEngine(c) })
		m.mu.Unlock()
		if !started {
			m.publishCheck(c, errorf(CodeServiceUnavailable, "the sandbox service is shutting down; retry later"))
		}
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return errorf(CodeServiceUnavailable, "the sandbox service is unavailable: the request ended while the backend was checking the container engine at %s; retry later", m.rt.Address())
	}
}

// checkEngine pings the engine, reconciles when it was away (or never
// answered yet), and publishes the outcome on c.
func (m *Manager) checkEngine(c *engineCheck) {
	m.publishCheck(c, m.pingAndReconcile())
}

func (m *Manager) publishCheck(c *engineCheck, err error) {
	m.engine.mu.Lock()
	defer m.engine.mu.Unlock()
	if m.engine.check == c {
		m.engine.check = nil
	}
	c.err = err
	close(c.done)
}

// engineTrusted says the engine answered (and was reconciled with) and
// nothing has seen it fail since.
func (m *Manager) engineTrusted() bool {
	m.engine.mu.Lock()
	defer m.engine.mu.Unlock()
	return !m.engine.down && !m.engine.lastOK.IsZero()
}

func (m *Manager) pingAndReconcile() error {
	m.engine.mu.Lock()
	needsReconcile := m.engine.down || m.engine.lastOK.IsZero()
	m.engine.mu.Unlock()

	pctx, cancel := context.WithTimeout(m.ctx, 3*time.Second)
	defer cancel()
	if err := m.rt.Ping(pctx); err != nil {
		m.engineDown(err)
		return errorf(CodeServiceUnavailable, "the sandbox service is unavailable: the container engine at %s does not answer; retry later", m.rt.Address())
	}
	if needsReconcile {
		rctx, rcancel := context.WithTimeout(m.ctx, 60*time.Second)
		defer rcancel()
		if err := m.reconcile(rctx); err != nil {
			m.engineDown(err)
			return errorf(CodeServiceUnavailable, "the sandbox service is unavailable: reconciling with the container engine at %s failed (the backend's log says why); retry later", m.rt.Address())
		}
	}
	m.engine.mu.Lock()
	m.engine.down = false
	m.engine.lastOK = time.Now()
	m.engine.mu.Unlock()
	return nil
}

func (m *Manager) engineDown(err error) {
	m.engine.mu.Lock()
	wasDown := m.engine.down
	m.engine.down = true
	m.engine.mu.Unlock()
	if !wasDown {
		m.log.Warn("container engine unavailable", "address", m.rt.Address(), "err", err)
		m.mu.Lock()
		m.goLocked(m.recoverEngine)
		m.mu.Unlock()
	}
}

// recoverEngine waits, with backoff, for the engine to come back, so that
// sandboxes whose containers went with it end even if nobody calls.
func (m *Manager) recoverEngine() {
	wait := 200 * time.Millisecond
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(wait):
		}
		if m.EngineAvailable(m.ctx) == nil {
			m.log.Info("container engine is back", "address", m.rt.Address())
			return
		}
		wait = min(wait*2, 5*time.Second)
	}
}
