package sandbox

import (
	"context"
	"errors"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Delete deletes the sandbox: once its record is gone from disk it
// answers, and from then on its id answers 404 and its capacity is free.
// The container (and its egress rules) goes in the background
// (removeDeletedLocked); a crash before that leaves an orphan container,
// which the next start's reconciliation removes.
func (m *Manager) Delete(ctx context.Context, account, id string) error {
	m.mu.Lock()
	sb := m.boxes[id]
	if sb == nil || sb.Account != account {
		m.mu.Unlock()
		return notFound(id)
	}
	w := m.forgetLocked(sb)
	m.mu.Unlock()
	if err := w.wait(); err != nil {
		// The record is still on disk: keep it, as if nothing happened.
		m.mu.Lock()
		if m.boxes[id] == nil {
			m.insertLocked(sb)
			m.scheduleLocked(sb)
		}
		m.mu.Unlock()
		return errorf(CodeInternal, "could not delete the record of sandbox %s: %v", sb.ID, err)
	}
	failpoint.Hit(failpoint.DeleteRecorded)
	m.mu.Lock()
	m.removeDeletedLocked(sb)
	m.mu.Unlock()
	return nil
}

// forgetLocked drops a record from memory and hands its removal from disk
// to the writer. The record goes before the container: a crash in between
// leaves an orphan container, which the next start removes, never a
// record that points at nothing.
func (m *Manager) forgetLocked(sb *store.Sandbox) *recordWrite {
	m.dropLocked(sb)
	return m.deleteSandboxLocked(sb.ID)
}

// dropLocked forgets a record in memory only.
func (m *Manager) dropLocked(sb *store.Sandbox) {
	delete(m.boxes, sb.ID)
	m.cancelStartLocked(sb.ID)
	m.forgetExecKeysLocked(sb.ID)
	m.unindexLocked(sb)
	m.notifyLocked(sb.ID)
	if t := m.timers[sb.ID]; t != nil {
		t.Stop()
		delete(m.timers, sb.ID)
	}
}

// removeContainer removes the sandbox's container by name, so a container
// whose start was still in flight goes too.
func (m *Manager) removeContainer(ctx context.Context, sb *store.Sandbox) error {
	if sb.ContainerID != "" {
		// A claimed warm container has a pool name, not the sandbox's.
		if err := m.rt.Remove(ctx, sb.ContainerID); err != nil && !errors.Is(err, container.ErrEngineUnavailable) {
			return errorf(CodeInternal, "could not remove the container of sandbox %s: %v", sb.ID, err)
		}
	}
	if err := m.rt.Remove(ctx, ContainerName(sb.ID)); err != nil {
		if errors.Is(err, container.ErrEngineUnavailable) {
			// The record is gone; reconciliation removes the container
			// once the engine is back.
			m.log.Warn("container removal deferred: engine unavailable", "sandbox", sb.ID, "err", err)
			return nil
		}
		return errorf(CodeInternal, "could not remove the container of sandbox %s: %v", sb.ID, err)
	}
	m.releaseEgress(sb.ID) // only once nothing of the sandbox runs
	return nil
}

// ContainerName is the name of a sandbox's own container (a claimed warm
// container keeps its pool name).
func ContainerName(id string) string { return "rarecloud-" + id }
