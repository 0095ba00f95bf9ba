package sandbox

import (
	"context"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Every goroutine the manager starts is tracked by m.wg, so Close returns
// only once the last of them has finished; none outlives the manager.
// goLocked is how they start: with m.mu held, so that Close, which sets
// closing under m.mu before it waits, never races an Add.

// goLocked runs fn in the background, tracked by Close; after Close it
// does nothing and returns false.
func (m *Manager) goLocked(fn func()) bool {
	if m.closing {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		fn()
	}()
	return true
}

// removeTimeout bounds one background removal of a container.
const removeTimeout = 30 * time.Second

// removeLaterLocked removes a container (by id or name) in the
// background. Close waits for it: a removal under way is finished, not
// cut short (it is bounded by removeTimeout). After Close, the next
// start's reconciliation removes what is left.
func (m *Manager) removeLaterLocked(ref string) {
	m.goLocked(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), removeTimeout)
		defer cancel()
		if err := m.rt.Remove(ctx, ref); err != nil {
			m.log.Warn("container not removed; the next reconciliation removes it", "container", ref, "err", err)
		}
	})
}

// removeDeletedLocked removes a deleted sandbox's container, and then its
// egress rules, in the background. A deleted sandbox's id never comes
// back (ids are random, and a create replayed by its Idempotency-Key
// answers with the deleted one), so no new container can want its name.
func (m *Manager) removeDeletedLocked(sb *store.Sandbox) {
	done := make(chan struct{})
	finish := func() {
		m.mu.Lock()
		if m.removing[sb.ID] == done {
			delete(m.removing, sb.ID)
		}
		m.mu.Unlock()
		close(done)
	}
	m.removing[sb.ID] = done
	started := m.goLocked(func() {
		defer finish()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), removeTimeout)
		defer cancel()
		if err := m.removeContainer(ctx, sb); err != nil {
			m.log.Warn("deleted sandbox's container not removed; the next reconciliation removes it", "sandbox", sb.ID, "err", err)
		}
	})
	if !started {
		// Closed: the next start's reconciliation removes the orphan.
		delete(m.removing, sb.ID)
		close(done)
	}
}

// AwaitRemovals waits until the containers of every sandbox deleted so
// far are removed, or ctx ends. Deletes answer before that; tests and the
// benchmark that look at the engine right after a delete wait here.
func (m *Manager) AwaitRemovals(ctx context.Context) error {
	m.mu.Lock()
	pending := make([]chan struct{}, 0, len(m.removing))
	for _, ch := range m.removing {
		pending = append(pending, ch)
	}
	m.mu.Unlock()
	for _, ch := range pending {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
