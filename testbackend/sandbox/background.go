package sandbox

import (
	"context"
	"time"
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
	if m.rt == nil {
		return
	}
	m.goLocked(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), removeTimeout)
		defer cancel()
		if err := m.rt.Remove(ctx, ref); err != nil {
			m.log.Warn("container not removed; the next reconciliation removes it", "container", ref, "err", err)
		}
	})
}
