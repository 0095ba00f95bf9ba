package sandbox

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// CreateResult says what a create produced.
type CreateResult struct {
	Sandbox  View
	Replayed bool // an earlier request with the same Idempotency-Key made it
}

// Create validates the request (validate.go) and has create make the
// sandbox: admitted, placed and recorded. A request with an
// Idempotency-Key goes through createIdempotent (create_idempotency.go),
// which replays an earlier answer or settles the key with this one.
func (m *Manager) Create(ctx context.Context, account, idemKey string, req CreateRequest) (CreateResult, error) {
	tpl, verr := m.validate(&req)
	if verr != nil {
		return CreateResult{}, verr
	}
	if idemKey == "" {
		return m.create(ctx, account, tpl, req, nil)
	}
	return m.createIdempotent(ctx, account, idemKey, tpl, req)
}

// create makes a valid sandbox in three steps, each in its own file:
// admit (create_admit.go) refuses what this backend cannot take now,
// before anything of the sandbox is made, so a refusal costs nothing;
// place (create_place.go) gives it a container if it gets one before its
// record is written; record (create_record.go) writes the record, and
// once it is on disk starts what place left pending. The lock is held
// from the capacity check to the record's insertion, so the capacity
// checked is the capacity taken, except while a start at once runs, when
// admission's hold keeps the sandbox's vCPUs.
func (m *Manager) create(ctx context.Context, account string, tpl Template, req CreateRequest, idem *store.Idempotency) (CreateResult, error) {
	image, err := m.admitImageFor(ctx, account, tpl, req)
	if err != nil {
		return CreateResult{}, err
	}
	m.mu.Lock()
	h, err := m.admitLocked(account, tpl)
	if err != nil {
		m.mu.Unlock()
		return CreateResult{}, err
	}
	sb := m.newRecord(account, tpl, image, req, idem)
	if err := m.placeLocked(ctx, sb, tpl, req); err != nil {
		m.unholdLocked(h)
		m.mu.Unlock()
		return CreateResult{}, err
	}
	w := m.recordLocked(sb, h)
	v := view(sb)
	m.mu.Unlock()
	return m.recorded(sb, v, w.wait())
}

// startAsyncLocked starts the sandbox's container in the background; the
// sandbox answers SANDBOX_NOT_READY until it runs.
//
// A start waits in the start queue (turnqueue.go) until its account's
// turn; a sandbox deleted or expired meanwhile cancels it there
// (cancelStartLocked), so that what an account deletes costs no start:
// otherwise creating and deleting at once would queue starts without
// bound, each a container start and removal of host CPU for nothing.
func (m *Manager) startAsyncLocked(sb *store.Sandbox) {
	if m.starting[sb.ID] != nil {
		return
	}
	queued, cancel := context.WithCancel(m.ctx)
	m.starting[sb.ID] = cancel
	spec := m.specFor(sb)
	spec.CPUWeight, spec.NanoCPUs = m.startCPULocked(sb, spec.NanoCPUs)
	id, account := sb.ID, sb.Account
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer cancel()
		release, err := m.starts.acquire(queued, account)
		if err != nil {
			// Shutting down (the next start resumes it), or the sandbox
			// is gone (started discards it): nothing was made.
			m.started(id, "", errNotStarted)
			return
		}
		cid, err := m.startWithEgress(id, spec)
		release()
		m.started(id, cid, err)
	}()
}

func (m *Manager) specFor(sb *store.Sandbox) container.Spec {
	tpl := m.templates[sb.Template]
	home, tmp := tpl.HomeDiskMB<<20, tpl.TmpDiskMB<<20
	if m.cfg.HomeBytes > 0 {
		home = m.cfg.HomeBytes
	}
	if m.cfg.TmpBytes > 0 {
		tmp = m.cfg.TmpBytes
	}
	return container.Spec{
		Name:        ContainerName(sb.ID),
		Image:       sb.Image,
		Entrypoint:  sb.Entrypoint,
		Cmd:         sb.Cmd,
		RunMode:     sb.RunMode,
		Env:         sb.Env,
		Labels:      map[string]string{container.LabelSandboxID: sb.ID},
		NanoCPUs:    int64(tpl.VCPU * 1e9),
		MemoryBytes: tpl.MemoryMB << 20,
		HomeBytes:   home,
		TmpBytes:    tmp,
		MaxProcs:    m.cfg.MaxProcs,
	}
}

// started records the outcome of a container start. A running status is
// on disk before the API shows it: a sandbox the API reported running is
// the same container after a crash (reconciliation adopts it), never one
// started again under its id. Until then the sandbox stays pending and
// m.starting keeps reconciliation off it.
func (m *Manager) started(id, cid string, startErr error) {
	m.mu.Lock()
	sb := m.boxes[id]
	if sb == nil || sb.Status != StatusPending || m.expiring[id] {
		m.startEndedLocked(id)
		m.mu.Unlock()
		m.discardStart(id, startErr)
		return
	}
	if startErr != nil {
		m.startEndedLocked(id)
		if m.ctx.Err() != nil {
			m.mu.Unlock() // shutting down: the next start resumes this one
			return
		}
		if errors.Is(startErr, container.ErrEngineUnavailable) {
			// Still pending: reconciliation starts it again once the engine is back.
			m.mu.Unlock()
			m.engineDown(startErr)
			return
		}
		m.log.Warn("sandbox start failed", "sandbox", id, "err", startErr)
		m.mu.Unlock()
		m.failStart(sb, startFailure(startErr))
		return
	}
	failpoint.Hit(failpoint.StartContainer)
	// The container holds the environment now (every exec inherits it):
	// the values, secrets among them, leave the record with this write.
	next := *sb
	next.ContainerID, next.Status, next.Env = cid, StatusRunning, nil
	w := m.putSandboxLocked(&next)
	m.mu.Unlock()
	if err := w.wait(); err != nil {
		m.mu.Lock()
		m.startEndedLocked(id)
		m.mu.Unlock()
		m.log.Warn("sandbox started but its running status could not be saved; ending it", "sandbox", id, "err", err)
		m.failStart(sb, "the sandbox could not start: the backend could not save its state")
		return
	}
	failpoint.Hit(failpoint.StartRecorded)

	m.mu.Lock()
	m.startEndedLocked(id)
	if m.boxes[id] != sb || sb.Status != StatusPending || m.expiring[id] {
		// Deleted or expired while its status was written: whoever did
		// it wrote the record last; the container must not outlive it.
		m.mu.Unlock()
		m.discardStart(id, nil)
		return
	}
	sb.ContainerID = cid
	sb.Status = StatusRunning
	sb.Env = nil
	m.reindexLocked(sb)
	m.startIdleClockLocked(sb, time.Now())
	m.scheduleLocked(sb)
	_ = m.persistLocked(sb) // the idle clock's deadline; the status is on disk
	m.notifyLocked(id)
	m.watchLocked(sb)
	m.mu.Unlock()
	failpoint.Hit(failpoint.StartAnswered)
}

// startEndedLocked says a start is over: reconciliation may judge the
// sandbox again, and warm-pool refills held back for cold starts go on.
func (m *Manager) startEndedLocked(id string) {
	delete(m.starting, id)
	m.resumeRefillsLocked() // refills wait for cold starts (pool.go)
}

// errNotStarted: a start left the start queue without a slot, having
// made nothing.
var errNotStarted = errors.New("the start was cancelled before it began")

// cancelStartLocked takes the start of a sandbox that is going out of the
// start queue if it still waits there; one that runs already ends as it
// would (started then discards what it made).
func (m *Manager) cancelStartLocked(id string) {
	if cancel := m.starting[id]; cancel != nil {
		cancel()
	}
}

// discardStart removes what the start of a sandbox that was deleted or
// expired meanwhile made. A start that failed may have left a container
// too (created, then cut short): it goes by name. One that never left the
// queue made nothing.
func (m *Manager) discardStart(id string, startErr error) {
	if !errors.Is(startErr, errNotStarted) {
		_ = m.rt.Remove(context.Background(), ContainerName(id))
	}
	m.releaseEgress(id)
}

// startFailure is what a failed start tells the sandbox's owner: the
// runtime's own words for an image it refused or a program the image
// lacks, else a plain statement.
// What the engine answered stays in the backend's log (started logs it):
// it names the host's setup, not anything the owner can change.
func startFailure(err error) string {
	const prefix = "the sandbox could not start: "
	var refused *container.ImageRefusedError
	var chosen *container.StartRefusedError
	switch {
	case errors.As(err, &refused):
		return prefix + refused.Msg
	case errors.As(err, &chosen):
		return prefix + chosen.Msg
	case errors.Is(err, container.ErrImageUnavailable):
		return prefix + "its image is no longer on the engine and could not be pulled again; create it once more"
	default:
		return prefix + "the container engine did not start it; the backend's log says why"
	}
}

// failStart removes a failed start's container and rules and ends the
// sandbox start_failed with message.
func (m *Manager) failStart(sb *store.Sandbox, message string) {
	_ = m.rt.Remove(context.Background(), ContainerName(sb.ID))
	m.releaseEgress(sb.ID)
	m.mu.Lock()
	if m.boxes[sb.ID] == sb && sb.Status == StatusPending {
		m.endLocked(sb, StatusTerminated, nil, ReasonStartFailed, message, 0)
	}
	m.mu.Unlock()
}

// endLocked moves a sandbox to a final status and keeps its record for the
// retention period. A terminated one says why: reason is one of the
// Reason* values, message the detail. logBytes is the size of the run-mode
// output already in the sandbox's log file (saveLogs), 0 for none: the
// record only says how much there is, the output stays on disk.
func (m *Manager) endLocked(sb *store.Sandbox, status string, exitCode *int, reason, message string, logBytes int64) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	sb.Status = status
	// An ended sandbox never starts again: whatever became of its start,
	// the env values (secrets among them) leave the record now.
	sb.Env = nil
	sb.ExitCode = exitCode
	sb.EndedAt = &now
	sb.TerminationReason = reason
	sb.TerminationMessage = message
	sb.IdleExpiresAt = nil
	sb.LogBytes, sb.Logs = logBytes, ""
	sb.ContainerID = ""
	m.reindexLocked(sb) // its vCPUs are free
	_ = m.persistLocked(sb)
	m.scheduleLocked(sb)
	m.notifyLocked(sb.ID)
	m.trimRetainedLocked(sb.Account)
}

// startContainer starts a sandbox's container. A container of the same
// name can only be left from a start that was cut short (a killed backend
// whose request the engine finished anyway): it goes, and the start is
// tried again.
func (m *Manager) startContainer(spec container.Spec) (string, error) {
	for attempt := 0; ; attempt++ {
		cid, err := m.rt.Start(m.ctx, spec)
		if err == nil || attempt == 3 || !strings.Contains(err.Error(), "is already in use") {
			return cid, err
		}
		m.log.Info("removing a leftover container before starting again", "name", spec.Name)
		if rerr := m.rt.Remove(m.ctx, spec.Name); rerr != nil {
			return "", rerr
		}
	}
}
