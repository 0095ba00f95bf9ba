package sandbox

import (
	"context"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Placement is the step of a create that gives the admitted sandbox its
// container, when it gets one before its record is written: on a runtime
// that runs nothing it starts at once (startImmediate,
// create_immediate.go); otherwise it takes a warm container if one fits
// (claimLocked, pool.go). A sandbox that gets neither stays pending and
// starts cold once its record is on disk (recorded, create_record.go):
// nothing of it starts before.

// placeLocked places the admitted sandbox sb. A start at once gives up the
// lock while it runs (the runtime is never called under it) and takes it
// again; its error is the create's answer (startImmediate removes what
// it started).
func (m *Manager) placeLocked(ctx context.Context, sb *store.Sandbox, tpl Template, req CreateRequest) error {
	if m.immediate {
		m.mu.Unlock()
		defer m.mu.Lock()
		return m.startImmediate(ctx, sb)
	}
	if claimed := m.claimLocked(sb.ID, sb.Account, tpl, req, sb.Image); claimed != "" {
		sb.Status, sb.ContainerID = StatusRunning, claimed
		m.startIdleClockLocked(sb, time.Now())
	}
	return nil
}
