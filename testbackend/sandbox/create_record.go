package sandbox

import (
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// The record is the last step of a create: the sandbox, admitted and
// placed, is built into a record (newRecord), handed to the writer and
// made live (recordLocked), and once it is on disk what was left pending
// starts (recorded).

// newRecord is the record of a new sandbox, pending.
func (m *Manager) newRecord(account string, tpl Template, image string, req CreateRequest, idem *store.Idempotency) *store.Sandbox {
	now := time.Now().UTC().Truncate(time.Millisecond)
	sb := &store.Sandbox{
		ID:         newID(),
		Account:    account,
		Status:     StatusPending,
		Template:   tpl.Name,
		Image:      image,
		CreatedAt:  now,
		TimeoutMs:  *req.TimeoutMs,
		ExpiresAt:  now.Add(time.Duration(*req.TimeoutMs) * time.Millisecond),
		RunMode:    req.Run || len(req.Entrypoint) > 0 || len(req.Cmd) > 0,
		Entrypoint: req.Entrypoint,
		Cmd:        req.Cmd,
		Env:        req.Env,
		EnvKeys:    sortedKeys(req.Env),
		Labels:     req.Labels,

		EgressMode:      req.EgressMode,
		EgressAllowlist: req.EgressAllowlist,

		IdleTimeoutMs: req.idleMs,
	}
	if idem != nil {
		sb.IdempotencyKey, sb.RequestHash = idem.Key, idem.RequestHash
	}
	return sb
}

// recordLocked hands the placed sandbox's record to the writer and puts it
// into m.boxes, where it counts the vCPUs admission held for it (h); the
// caller waits for the write off the lock, then calls recorded.
func (m *Manager) recordLocked(sb *store.Sandbox, h hold) *recordWrite {
	// The record holds its capacity from here; it is written off the lock
	// and nothing of it starts before it is on disk.
	w := m.putSandboxLocked(sb)
	m.insertLocked(sb)
	m.unholdLocked(h)
	m.scheduleLocked(sb)
	m.trimRetainedLocked(sb.Account) // a run-mode job started at once has ended
	return w
}

// recorded finishes a create once its record's write is done (werr its
// error); v is the sandbox as it was recorded. A failed write undoes the
// placement; a sandbox deleted before its record was on disk answers as
// it was recorded; otherwise a pending one starts now, and a container
// it already has is watched.
func (m *Manager) recorded(sb *store.Sandbox, v View, werr error) (CreateResult, error) {
	if werr == nil && v.Status == StatusRunning {
		failpoint.Hit(failpoint.ClaimRecorded)
	} else if werr == nil {
		failpoint.Hit(failpoint.CreateRecorded)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if werr != nil {
		if m.boxes[sb.ID] == sb {
			m.forgetLocked(sb)
		}
		if sb.ContainerID != "" {
			m.removeLaterLocked(sb.ContainerID) // claimed, or started at once
		}
		return CreateResult{}, errorf(CodeInternal, "could not save sandbox %s: %v", sb.ID, werr)
	}
	if m.boxes[sb.ID] != sb {
		// Deleted before its record was on disk: Delete removes the claimed
		// (or at once started) container, and nothing else was started.
		return CreateResult{Sandbox: v}, nil
	}
	switch sb.Status {
	case StatusPending:
		m.startAsyncLocked(sb)
	case StatusRunning:
		m.watchLocked(sb) // a claimed, or at once started, container
	}
	return CreateResult{Sandbox: view(sb)}, nil
}
