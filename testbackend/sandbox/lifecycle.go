package sandbox

import (
	"context"
	"errors"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
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
	execKeys, err := m.st.ExecKeys()
	if err != nil {
		return err
	}
	migrated := m.moveInlineLogs(boxes)
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
		m.accountLocked(rec.Account).keys.add(mapKey, rec.CreatedAt, m.nextSeqLocked())
	}
	var overdue []*store.Sandbox
	for _, sb := range boxes {
		legacyReason(sb)
		if sb.Status == StatusRunning {
			// Nobody could use the sandbox while the backend was down:
			// its idle clock starts again now.
			m.startIdleClockLocked(sb, now)
		}
		m.insertLocked(sb)
		if sb.IdempotencyKey != "" {
			// The key's own record may not have been written before a crash.
			mapKey := sb.Account + "\x00" + sb.IdempotencyKey
			if m.idem[mapKey] == nil {
				e := &idemEntry{rec: store.Idempotency{Account: sb.Account, Key: sb.IdempotencyKey, RequestHash: sb.RequestHash, SandboxID: sb.ID, Status: 201, CreatedAt: sb.CreatedAt}, done: true}
				e.rec.Body, _ = encodeKept(view(sb))
				m.idem[mapKey] = e
				m.scheduleIdemExpiryLocked(mapKey, e)
				m.accountLocked(sb.Account).keys.add(mapKey, e.rec.CreatedAt, m.nextSeqLocked())
			}
		}
		if m.deadline(sb).After(now) {
			m.scheduleLocked(sb)
		} else {
			overdue = append(overdue, sb)
		}
	}
	m.loadExecKeysLocked(execKeys) // before the overdue go, and their keys with them
	for _, sb := range migrated {
		if m.boxes[sb.ID] == sb {
			m.putSandboxLocked(sb) // a failure is logged; the next start moves it again
		}
	}
	for _, sb := range overdue {
		m.log.Info("applying expiry that fell while the backend was down", "sandbox", sb.ID, "status", sb.Status)
		m.forgetLocked(sb)
	}
	// The caps may be lower than when the records were written.
	for account := range m.accounts {
		m.trimRetainedLocked(account)
		m.trimKeysLocked(account)
	}
	if m.weights != nil {
		m.goLocked(m.weighLoop) // the sandboxes loaded above are marked
	}
	m.mu.Unlock()
	m.removeOrphanLogs(boxes)

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

// moveInlineLogs moves the output that records from before log files hold
// inline into their log files, so that it is no longer held in memory;
// it returns the records to write again. One whose file cannot be written
// keeps its output inline (and still answers its logs).
func (m *Manager) moveInlineLogs(boxes []*store.Sandbox) []*store.Sandbox {
	var moved []*store.Sandbox
	for _, sb := range boxes {
		if sb.Logs == "" {
			continue
		}
		if err := m.st.PutLogs(sb.ID, []byte(sb.Logs)); err != nil {
			m.log.Warn("inline logs not moved to their file; they stay in the record", "sandbox", sb.ID, "err", err)
			continue
		}
		sb.LogBytes, sb.Logs = int64(len(sb.Logs)), ""
		moved = append(moved, sb)
	}
	return moved
}

// removeOrphanLogs removes log files without a record: left by a crash
// between a record's removal and its log file's.
func (m *Manager) removeOrphanLogs(boxes []*store.Sandbox) {
	ids, err := m.st.LogIDs()
	if err != nil {
		m.log.Warn("log files not listed", "err", err)
		return
	}
	known := make(map[string]bool, len(boxes))
	for _, sb := range boxes {
		known[sb.ID] = true
	}
	for _, id := range ids {
		if !known[id] {
			m.dropLogs(id)
		}
	}
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
	m.cancelStartLocked(id)
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
func (m *Manager) exited(id, cid string, exit container.Exit) {
	m.mu.Lock()
	sb := m.boxes[id]
	if sb == nil || sb.ContainerID != cid || sb.Status != StatusRunning || m.expiring[id] {
		m.mu.Unlock() // deleted or expired: the exit is our own doing
		return
	}
	runMode := sb.RunMode
	m.mu.Unlock()

	// A run-mode program's output goes to the sandbox's log file before
	// its record says it exited: the record (and memory) only holds its
	// size, and a read of the logs finds the file there.
	var logBytes int64
	if runMode {
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		logs, err := m.rt.Logs(ctx, cid, MaxLogBytes, nil)
		cancel()
		if err != nil {
			m.log.Warn("could not collect logs", "sandbox", id, "err", err)
		}
		logBytes = m.saveLogs(id, logs)
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
		if logBytes > 0 {
			// Deleted or expired meanwhile: its removal may have run
			// before the file was written.
			m.dropLogs(id)
		}
		return
	}
	if runMode {
		c := exit.Code
		m.endLocked(sb, StatusExited, &c, "", "", logBytes)
	} else {
		reason, msg := m.terminationCause(sb, exit)
		m.endLocked(sb, StatusTerminated, nil, reason, msg, 0)
	}
	m.mu.Unlock()
}

// saveLogs writes a run-mode program's output to the sandbox's log file
// and returns its size; nothing is written for none. A failed write is
// logged and the output lost: the sandbox still ends, with no logs.
func (m *Manager) saveLogs(id string, logs []byte) int64 {
	if len(logs) == 0 {
		return 0
	}
	if err := m.st.PutLogs(id, logs); err != nil {
		m.log.Error("logs not written", "sandbox", id, "err", err)
		return 0
	}
	return int64(len(logs))
}

// dropLogs removes the log file of a sandbox that has no record (any
// more); a failure is logged, and the next start removes the file.
func (m *Manager) dropLogs(id string) {
	if err := m.st.DeleteLogs(id); err != nil {
		m.log.Warn("log file not removed; the next start removes it", "sandbox", id, "err", err)
	}
}

// containerGone handles a wait that failed: the container vanished or the
// engine went away. Reconciliation sorts out which.
func (m *Manager) containerGone(id string, err error) {
	m.log.Warn("lost sight of a sandbox container", "sandbox", id, "err", err)
	if errors.Is(err, container.ErrEngineUnavailable) {
		m.engineDown(err)
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	if err := m.reconcile(ctx); err != nil {
		m.engineDown(err)
	}
}
