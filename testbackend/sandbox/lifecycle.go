package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/runtime"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Start loads the records, applies expiries that fell while the backend
// was down, and reconciles with the engine if it answers. An engine that
// does not answer is not fatal: the API answers 503 until it does.
func (m *Manager) Start(ctx context.Context) error {
	boxes, err := m.st.Sandboxes()
	if err != nil {
		return err
	}
	keys, err := m.st.Idempotencies()
	if err != nil {
		return err
	}
	now := time.Now()
	m.mu.Lock()
	for _, rec := range keys {
		mapKey := rec.Account + "\x00" + rec.Key
		if now.Sub(rec.CreatedAt) >= m.cfg.IdempotencyTTL {
			m.deleteIdempotencyLocked(rec.Account, rec.Key)
			continue
		}
		e := &idemEntry{rec: *rec, done: true}
		m.idem[mapKey] = e
		m.scheduleIdemExpiryLocked(mapKey, e)
	}
	var overdue []*store.Sandbox
	for _, sb := range boxes {
		legacyReason(sb)
		if sb.Status == StatusRunning {
			// Nobody could use the sandbox while the backend was down:
			// its idle clock starts again now.
			m.startIdleClockLocked(sb, now)
		}
		m.boxes[sb.ID] = sb
		if sb.IdempotencyKey != "" {
			// The key's own record may not have been written before a crash.
			mapKey := sb.Account + "\x00" + sb.IdempotencyKey
			if m.idem[mapKey] == nil {
				e := &idemEntry{rec: store.Idempotency{Account: sb.Account, Key: sb.IdempotencyKey, RequestHash: sb.RequestHash, SandboxID: sb.ID, Status: 201, CreatedAt: sb.CreatedAt}, done: true}
				e.rec.Body, _ = json.Marshal(view(sb))
				m.idem[mapKey] = e
				m.scheduleIdemExpiryLocked(mapKey, e)
			}
		}
		if m.deadline(sb).After(now) {
			m.scheduleLocked(sb)
		} else {
			overdue = append(overdue, sb)
		}
	}
	for _, sb := range overdue {
		m.log.Info("applying expiry that fell while the backend was down", "sandbox", sb.ID, "status", sb.Status)
		m.forgetLocked(sb)
	}
	m.mu.Unlock()

	if m.cfg.Mode == ModeTest {
		return nil
	}
	// Before anything else: live restricted sandboxes get their rules back
	// (a reboot or a lost table), and rules of sandboxes that ended while
	// the backend was away go.
	if err := m.syncEgress(ctx, overdue); err != nil {
		return err
	}
	for _, sb := range overdue {
		_ = m.removeContainer(ctx, sb)
	}
	if err := m.EngineAvailable(ctx); err != nil {
		m.log.Warn("container engine unavailable at start; sandbox routes answer 503 until it is back", "err", err)
	}
	return nil
}

// fillPools tops up every template's warm pool; reconciliation calls it
// once records and containers agree.
func (m *Manager) fillPools() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, name := range m.order {
		m.refillLocked(name)
	}
}

// deadline is when a record goes away: at expiry while it runs, at the end
// of retention once it ended. A running sandbox with an idle timeout ends
// earlier when its idle clock runs out first (lifetime.go).
func (m *Manager) deadline(sb *store.Sandbox) time.Time {
	if (sb.Status == StatusExited || sb.Status == StatusTerminated) && sb.EndedAt != nil {
		return sb.EndedAt.Add(m.cfg.Retention)
	}
	if sb.Status == StatusRunning && sb.IdleExpiresAt != nil && sb.IdleExpiresAt.Before(sb.ExpiresAt) {
		return *sb.IdleExpiresAt
	}
	return sb.ExpiresAt
}

// scheduleLocked arms the one timer a record has: expiry or end of retention.
func (m *Manager) scheduleLocked(sb *store.Sandbox) {
	if t := m.timers[sb.ID]; t != nil {
		t.Stop()
	}
	id := sb.ID
	m.timers[id] = time.AfterFunc(max(time.Until(m.deadline(sb)), 0), func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.goLocked(func() { m.expire(id) }) // tracked: Close waits for an expiry under way
	})
}

// expire removes a sandbox whose lifetime or retention ran out: the
// container is stopped and removed and the id answers 404.
func (m *Manager) expire(id string) {
	m.mu.Lock()
	sb := m.boxes[id]
	now := time.Now()
	if sb == nil || m.expiring[id] {
		m.mu.Unlock()
		return
	}
	if m.deadline(sb).After(now) {
		// Moved since the timer was set (activity, PATCH).
		m.scheduleLocked(sb)
		m.mu.Unlock()
		return
	}
	if idleDue(sb, now) {
		if m.busy[id] > 0 {
			// An operation is under way: it is activity until it ends
			// (and its end starts the clock again).
			m.touchLocked(sb)
			m.scheduleLocked(sb)
			m.mu.Unlock()
			return
		}
		m.expiring[id] = true
		m.mu.Unlock()
		m.endIdle(sb)
		return
	}
	m.log.Info("sandbox expired", "sandbox", id, "status", sb.Status)
	// The container goes first, so that once the id answers 404 nothing of
	// the sandbox runs any more; ending tells the exit watcher that this
	// exit is our own doing. A crash in between leaves a record whose
	// deadline has passed, which the next start applies again.
	m.expiring[id] = true
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	if err := m.removeContainer(ctx, sb); err != nil {
		m.log.Warn("expired sandbox's container not removed; the next reconciliation removes it", "sandbox", id, "err", err)
	}
	m.mu.Lock()
	delete(m.expiring, id)
	if m.boxes[id] == sb {
		m.forgetLocked(sb) // a failed delete is logged by the writer
	}
	m.mu.Unlock()
}

// watchLocked waits, in the background, for the sandbox's main process to
// end: an event from the engine, not a poll.
func (m *Manager) watchLocked(sb *store.Sandbox) {
	if m.watching[sb.ID] || sb.ContainerID == "" {
		return
	}
	m.watching[sb.ID] = true
	id, cid := sb.ID, sb.ContainerID
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		exit := m.rt.Wait(m.ctx, cid)
		m.mu.Lock()
		delete(m.watching, id)
		sb := m.boxes[id]
		ours := sb == nil || sb.ContainerID != cid || sb.Status != StatusRunning || m.expiring[id]
		m.mu.Unlock()
		if m.ctx.Err() != nil {
			return
		}
		if exit.Err != nil {
			if ours {
				return // deleted, expired or ended: the container went by our doing
			}
			m.containerGone(id, exit.Err)
			return
		}
		m.exited(id, cid, exit)
	}()
}

// exited records how a container's main process ended. In run mode that
// is the result; otherwise the keepalive died (out of memory, killed) and
// the sandbox is terminated.
func (m *Manager) exited(id, cid string, exit runtime.Exit) {
	m.mu.Lock()
	sb := m.boxes[id]
	if sb == nil || sb.ContainerID != cid || sb.Status != StatusRunning || m.expiring[id] {
		m.mu.Unlock() // deleted or expired: the exit is our own doing
		return
	}
	runMode := sb.RunMode
	m.mu.Unlock()

	var logs []byte
	if runMode {
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		var err error
		logs, err = m.rt.Logs(ctx, cid, MaxLogBytes)
		cancel()
		if err != nil {
			m.log.Warn("could not collect logs", "sandbox", id, "err", err)
		}
	}

	// The container goes before the status changes: once a sandbox shows
	// exited or terminated, nothing of it runs any more.
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	if err := m.rt.Remove(ctx, cid); err != nil {
		m.log.Warn("ended sandbox's container not removed; the next reconciliation removes it", "sandbox", id, "err", err)
	} else {
		m.releaseEgress(id)
	}

	m.mu.Lock()
	sb = m.boxes[id]
	if sb == nil || sb.ContainerID != cid || sb.Status != StatusRunning || m.expiring[id] {
		m.mu.Unlock()
		return
	}
	if runMode {
		c := exit.Code
		m.endLocked(sb, StatusExited, &c, "", "", string(logs))
	} else {
		reason, msg := m.terminationCause(sb, exit)
		m.endLocked(sb, StatusTerminated, nil, reason, msg, "")
	}
	m.mu.Unlock()
}

// containerGone handles a wait that failed: the container vanished or the
// engine went away. Reconciliation sorts out which.
func (m *Manager) containerGone(id string, err error) {
	m.log.Warn("lost sight of a sandbox container", "sandbox", id, "err", err)
	if errors.Is(err, runtime.ErrEngineUnavailable) {
		m.engineDown(err)
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	if err := m.reconcile(ctx); err != nil {
		m.engineDown(err)
	}
}

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
	if m.cfg.Mode == ModeTest {
		return nil
	}
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
			return errorf(CodeServiceUnavailable, "the sandbox service is unavailable: reconciling with the container engine at %s failed: %v", m.rt.Address(), err)
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

// reconcile makes records and containers agree: containers without a live
// record go; live records whose container is gone end; pending records
// whose start was cut short start again.
//
// The engine's list is a snapshot taken before the manager's lock: a
// sandbox that got its container after it (a start that finished, a warm
// container claimed) is missing from it, or shows a container that was
// not running yet. So a running sandbox is never ended on the first list
// alone: it is a suspect, judged again on a second list taken after the
// first judgement, and only if its record still names the same container.
func (m *Manager) reconcile(ctx context.Context) error {
	containers, err := m.rt.List(ctx)
	if err != nil {
		return err
	}
	seen := indexContainers(containers)

	var remove []string
	var restart []*store.Sandbox
	var suspects []suspect
	var poolSuspects []string
	m.mu.Lock()
	claimed := map[string]bool{}
	for _, sb := range m.boxes {
		if sb.ContainerID != "" {
			claimed[sb.ContainerID] = true
		}
	}
	for _, c := range containers {
		if tpl := c.Labels[runtime.LabelPool]; tpl != "" {
			// Warm containers: keep the claimed ones, the ones this pool
			// holds and still runs, and the ones being started.
			p := m.pools[tpl]
			if claimed[c.ID] || (p != nil && (p.names[strings.TrimPrefix(c.Name, "/")] || (c.Running && slices.Contains(p.ready, c.ID)))) {
				continue
			}
			remove = append(remove, c.ID)
			continue
		}
		sb := m.boxes[c.Labels[runtime.LabelSandboxID]]
		if sb == nil || sb.Status == StatusExited || sb.Status == StatusTerminated {
			remove = append(remove, c.ID)
		}
	}
	for _, p := range m.pools {
		// A ready container missing from the list may have become ready
		// after it: the second list decides. One listed as stopped goes
		// (it is in remove above).
		p.ready = slices.DeleteFunc(p.ready, func(id string) bool {
			c, ok := seen.byID[id]
			if !ok {
				poolSuspects = append(poolSuspects, id)
			}
			return ok && !c.Running
		})
	}
	for _, sb := range m.boxes {
		c, ok := seen.find(sb)
		switch sb.Status {
		case StatusPending:
			if m.starting[sb.ID] {
				continue // its start is in flight
			}
			if ok {
				remove = append(remove, c.ID)
			}
			restart = append(restart, sb)
		case StatusRunning:
			if !ok || !c.Running {
				suspects = append(suspects, suspect{sb: sb, cid: sb.ContainerID})
				continue
			}
			m.adoptLocked(sb, c)
		}
	}
	m.mu.Unlock()

	for _, id := range remove {
		if err := m.rt.Remove(ctx, id); err != nil {
			return err
		}
		if sid := seen.byID[id].Labels[runtime.LabelSandboxID]; sid != "" {
			m.releaseEgress(sid)
		}
	}
	if err := m.judgeSuspects(ctx, suspects, poolSuspects); err != nil {
		return err
	}
	// Removal above must finish before a new container takes the name.
	m.mu.Lock()
	for _, sb := range restart {
		if m.boxes[sb.ID] == sb && sb.Status == StatusPending {
			m.startAsyncLocked(sb)
		}
	}
	m.mu.Unlock()
	m.fillPools()
	return nil
}

// suspect is a running sandbox whose container the first list of a
// reconcile did not show running, with the container its record named then.
type suspect struct {
	sb  *store.Sandbox
	cid string
}

// containerIndex finds a list's containers by id and by name.
type containerIndex struct {
	byID, byName map[string]runtime.Container
}

func indexContainers(cs []runtime.Container) containerIndex {
	x := containerIndex{byID: map[string]runtime.Container{}, byName: map[string]runtime.Container{}}
	for _, c := range cs {
		x.byName[strings.TrimPrefix(c.Name, "/")] = c
		x.byID[c.ID] = c
	}
	return x
}

// find returns the sandbox's container: by the id its record holds, else
// by its name (a start cut short before the id was recorded).
func (x containerIndex) find(sb *store.Sandbox) (runtime.Container, bool) {
	if c, ok := x.byID[sb.ContainerID]; ok && sb.ContainerID != "" {
		return c, true
	}
	c, ok := x.byName[containerName(sb.ID)]
	return c, ok
}

// adoptLocked watches a running sandbox's live container, recording its
// id when the record did not have it.
func (m *Manager) adoptLocked(sb *store.Sandbox, c runtime.Container) {
	if sb.ContainerID != c.ID {
		sb.ContainerID = c.ID
		_ = m.persistLocked(sb)
	}
	m.watchLocked(sb)
}

// judgeSuspects takes a second list and ends the suspects whose container
// is really gone (container_lost, or engine_lost when the engine was away)
// or has exited (its exit is collected as the watcher would have). A
// suspect whose record changed meanwhile (deleted, ended, another
// container) is left to whoever changed it. Warm containers that the
// second list does not show leave the pool's ready list.
func (m *Manager) judgeSuspects(ctx context.Context, suspects []suspect, poolSuspects []string) error {
	if len(suspects) == 0 && len(poolSuspects) == 0 {
		return nil
	}
	containers, err := m.rt.List(ctx)
	if err != nil {
		return err
	}
	now := indexContainers(containers)
	m.engine.mu.Lock()
	engineLost := m.engine.down
	m.engine.mu.Unlock()

	type exit struct {
		id, cid string
		c       runtime.Container
	}
	var lost []string
	var collect []exit
	m.mu.Lock()
	for _, s := range suspects {
		sb := m.boxes[s.sb.ID]
		if sb != s.sb || sb.Status != StatusRunning || sb.ContainerID != s.cid || m.expiring[sb.ID] {
			continue
		}
		c, ok := now.find(sb)
		switch {
		case !ok:
			reason, msg := ReasonContainerLost, "the sandbox's container was killed or removed from outside the backend"
			if engineLost {
				reason, msg = ReasonEngineLost, "the sandbox's container went while the container engine at "+m.rt.Address()+" was unavailable (it restarted or crashed)"
			}
			m.endLocked(sb, StatusTerminated, nil, reason, msg, "")
			lost = append(lost, sb.ID)
		case !c.Running:
			collect = append(collect, exit{id: sb.ID, cid: c.ID, c: c})
		default:
			m.adoptLocked(sb, c)
		}
	}
	for _, p := range m.pools {
		p.ready = slices.DeleteFunc(p.ready, func(id string) bool {
			_, ok := now.byID[id]
			return !ok && slices.Contains(poolSuspects, id)
		})
	}
	m.mu.Unlock()

	for _, id := range lost {
		m.releaseEgress(id)
	}
	for _, e := range collect {
		m.exited(e.id, e.cid, runtime.Exit{Code: e.c.ExitCode, EngineLost: engineLost})
	}
	return nil
}
