package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// A warm pool keeps started, locked-down containers per template, so a
// create from a template answers with a running sandbox at once. A pooled
// container carries no sandbox's data: env travels with each exec, and a
// container is never handed out twice. Pool members are not records, so
// they are neither listed nor billed.
//
// Replacing a claimed container is host work done for the account that
// claimed it: the refill takes its turn in that account's line of the
// start queue (turnqueue.go), its share and rest included, as the
// account's own cold start would. Otherwise an account that creates and
// deletes again and again from the pool would have the host start
// containers for it outside its share of starts.
//
// While another account is on the host, a claim is itself a start turn
// of its account: a create takes a warm container only if its account
// could start one at that moment (a slot free, the account under its
// start share, none of its starts waiting), and the claim's refill runs
// in that turn, so the account's rest counts from the claim. Otherwise
// the create starts cold in its line. An account's burst of creates then
// gets no more sandboxes going at once from the pool than from cold
// starts; an account alone claims whenever a container is ready.
type warmPool struct {
	ready   []string // container ids, oldest first
	filling int
	held    bool            // a refill waits for the cold starts under way (refillLocked)
	names   map[string]bool // containers being started, which reconciliation must leave alone
	backoff time.Duration   // after a failed start, wait before trying again
	// owed lists the starts that replace claimed containers, oldest
	// first; a start with none owed takes the pool's own turn (poolTurn).
	owed []owedStart
}

// owedStart is a warm start a claim owes: it waits for a turn in
// account's line of the start queue, or, when the claim took that turn
// already, runs in it and gives it back (turn).
type owedStart struct {
	account string
	turn    func() // the release of a turn held since the claim, or nil
}

// take is the turn the start runs in: the one its claim holds, or the
// next in account's line (an error: ctx ended first).
func (o owedStart) take(ctx context.Context, q *turnQueue) (release func(), err error) {
	if o.turn != nil {
		return o.turn, nil
	}
	return q.acquire(ctx, o.account)
}

// giveBack releases the turn the start holds, if any.
func (o owedStart) giveBack() {
	if o.turn != nil {
		o.turn()
	}
}

// poolTurn is the start queue's line for warm starts no claim owes: the
// first fill, and the retries after a failed start.
const poolTurn = ""

// claimLocked takes a warm container for the request, or returns "". A
// request with environment variables never gets one: its container must
// start with them, so that the record need not keep their values.
func (m *Manager) claimLocked(sandboxID, account string, tpl Template, req CreateRequest, image string) string {
	if !m.warmReadyLocked(tpl, req, image) {
		return ""
	}
	owed := owedStart{account: account}
	if m.contended() {
		turn, ok := m.starts.tryAcquire(account)
		if !ok {
			return ""
		}
		owed.turn = turn
	}
	p := m.pools[tpl.Name]
	cid := p.ready[0]
	p.ready = p.ready[1:]
	m.deferRefillLocked(sandboxID, tpl.Name, owed)
	return cid
}

// warmReadyLocked says whether a warm container is there for the request.
// A restricted sandbox starts cold: its rules are keyed on an address
// chosen before its container exists (egress_start.go).
func (m *Manager) warmReadyLocked(tpl Template, req CreateRequest, image string) bool {
	p := m.pools[tpl.Name]
	return p != nil && len(p.ready) > 0 && image == tpl.Image && len(req.Env) == 0 && !req.Run &&
		len(req.Entrypoint) == 0 && len(req.Cmd) == 0 && req.EgressMode == EgressAllowAll
}

// DefaultRefillDelay is the longest a claim's refill waits for the
// claimed sandbox's first operation.
const DefaultRefillDelay = time.Second

// deferredRefill is the refill a claim owes its pool: it starts when the
// claimed sandbox's first operation ends (activity, lifetime.go), or at
// the latest when the timer fires. On two cores, a warm container's start
// (a gVisor boot) would otherwise take the CPU of that first command.
type deferredRefill struct {
	template string
	owed     owedStart // the claimer's start turn
	timer    *time.Timer
}

func (m *Manager) deferRefillLocked(sandboxID, template string, owed owedStart) {
	if m.cfg.RefillDelay < 0 {
		m.refillForLocked(template, owed)
		return
	}
	m.refills[sandboxID] = &deferredRefill{template: template, owed: owed, timer: time.AfterFunc(m.cfg.RefillDelay, func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.refillOwedLocked(sandboxID)
	})}
}

// refillOwedLocked starts the refill a claim by sandboxID owes, if any.
func (m *Manager) refillOwedLocked(sandboxID string) {
	r := m.refills[sandboxID]
	if r == nil {
		return
	}
	r.timer.Stop()
	delete(m.refills, sandboxID)
	m.refillForLocked(r.template, r.owed)
}

// refillForLocked refills the template's pool for a claimed container:
// the next warm start is the one the claim owes.
func (m *Manager) refillForLocked(template string, owed owedStart) {
	if m.cfg.PoolSize <= 0 || m.ctx.Err() != nil {
		owed.giveBack()
		return
	}
	p := m.poolLocked(template)
	p.owed = append(p.owed, owed)
	m.refillLocked(template)
}

// poolLocked is the template's pool, made on first use.
func (m *Manager) poolLocked(template string) *warmPool {
	p := m.pools[template]
	if p == nil {
		p = &warmPool{names: map[string]bool{}}
		m.pools[template] = p
	}
	return p
}

// maxRefillHold bounds how long cold starts hold a refill back.
const maxRefillHold = 10 * time.Second

// refillLocked starts containers until the template's pool is full. While
// sandboxes start cold (creates that found the pool empty or cannot use
// it), the refill waits for them: on two cores a warm start would take
// the CPU of a start a user waits for. The last cold start to end
// resumes it (resumeRefillsLocked), or at the latest maxRefillHold.
func (m *Manager) refillLocked(template string) {
	if m.cfg.PoolSize <= 0 || m.ctx.Err() != nil {
		return
	}
	p := m.poolLocked(template)
	if len(m.starting) > 0 {
		if !p.held {
			p.held = true
			time.AfterFunc(maxRefillHold, func() {
				m.mu.Lock()
				defer m.mu.Unlock()
				if p.held && m.ctx.Err() == nil {
					p.held = false
					m.fillLocked(template, p)
				}
			})
		}
		return
	}
	p.held = false
	m.fillLocked(template, p)
}

// resumeRefillsLocked starts the refills held back by cold starts once
// none is under way.
func (m *Manager) resumeRefillsLocked() {
	if len(m.starting) > 0 || m.ctx.Err() != nil {
		return
	}
	for name, p := range m.pools {
		if p.held {
			p.held = false
			m.fillLocked(name, p)
		}
	}
}

func (m *Manager) fillLocked(template string, p *warmPool) {
	for len(p.ready)+p.filling < m.cfg.PoolSize {
		p.filling++
		spec := m.poolSpec(template)
		p.names[spec.Name] = true
		wait := p.backoff
		owed := owedStart{account: poolTurn}
		if len(p.owed) > 0 {
			owed, p.owed = p.owed[0], p.owed[1:]
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			if wait > 0 {
				select {
				case <-time.After(wait):
				case <-m.ctx.Done():
				}
			}
			release, err := owed.take(m.ctx, m.starts)
			if err != nil { // shutting down
				m.poolStarted(template, spec.Name, "", err)
				return
			}
			cid, err := m.startWarm(spec)
			release()
			m.poolStarted(template, spec.Name, cid, err)
		}()
	}
	// Claims whose containers another start replaced already (a retry
	// filled the pool meanwhile) owe nothing more: their turns go back.
	for _, o := range p.owed {
		o.giveBack()
	}
	p.owed = nil
}

// prepareTimeout bounds the preparation of one warm container.
const prepareTimeout = 30 * time.Second

// startWarm starts a warm container and prepares it for its first command
// (container.Runtime.Prepare), so a claimed sandbox's first command costs
// what its later ones do. A container that cannot be prepared is not
// handed out: it counts as a failed start.
func (m *Manager) startWarm(spec container.Spec) (string, error) {
	cid, err := m.rt.Start(m.ctx, spec)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(m.ctx, prepareTimeout)
	defer cancel()
	if err := m.rt.Prepare(ctx, cid); err != nil {
		return "", fmt.Errorf("preparing warm container %s: %w", spec.Name, err)
	}
	return cid, nil
}

func (m *Manager) poolStarted(template, name, cid string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pools[template]
	p.filling--
	if err != nil || m.ctx.Err() != nil {
		delete(p.names, name)
		if m.ctx.Err() == nil {
			m.log.Warn("warm pool: container did not start", "template", template, "err", err)
			p.backoff = min(max(p.backoff*2, 500*time.Millisecond), 30*time.Second)
		}
		m.removeLaterLocked(name)
		if m.ctx.Err() == nil {
			m.refillLocked(template)
		}
		return
	}
	delete(p.names, name)
	p.backoff = 0
	p.ready = append(p.ready, cid)
	m.poolNotifyLocked()
}

func (m *Manager) poolSpec(template string) container.Spec {
	spec := m.specFor(&store.Sandbox{ID: "pool", Template: template, Image: m.templates[template].Image})
	spec.Name = "rarecloud-pool-" + newID()[4:]
	spec.Labels = map[string]string{container.LabelPool: template}
	return spec
}

// drainPools removes every idle warm container.
func (m *Manager) drainPools() {
	m.mu.Lock()
	var idle []string
	for _, p := range m.pools {
		idle = append(idle, p.ready...)
		p.ready = nil
	}
	m.mu.Unlock()
	if len(idle) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.rt.Remove(ctx, id); err != nil {
				m.log.Warn("warm pool: container not removed at shutdown; the next start removes it", "container", id, "err", err)
			}
		}()
	}
	wg.Wait()
}

// PoolReady reports how many warm containers a template has, for tests
// and the benchmark.
func (m *Manager) PoolReady(template string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pools[template]; p != nil {
		return len(p.ready)
	}
	return 0
}

// WaitPoolFull blocks until every template's pool is full or ctx ends.
func (m *Manager) WaitPoolFull(ctx context.Context) error {
	for {
		m.mu.Lock()
		full := true
		if m.cfg.PoolSize > 0 {
			for _, name := range m.order {
				if p := m.pools[name]; p == nil || len(p.ready) < m.cfg.PoolSize {
					full = false
				}
			}
		}
		changed := m.poolChanged
		m.mu.Unlock()
		if full {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		}
	}
}

// poolNotifyLocked wakes WaitPoolFull: an event, not a poll.
func (m *Manager) poolNotifyLocked() {
	close(m.poolChanged)
	m.poolChanged = make(chan struct{})
}
