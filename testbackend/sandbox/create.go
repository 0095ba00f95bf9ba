package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// idemEntry is a key in flight or done. Done entries hold either the
// sandbox id or the client error the first request got.
type idemEntry struct {
	rec    store.Idempotency
	done   bool
	expiry *time.Timer // forgets the key after IdempotencyTTL
}

// MaxIdempotencyKeyLen bounds the Idempotency-Key header.
const MaxIdempotencyKeyLen = 255

// ValidateIdempotencyKey checks the header: 1 to 255 printable ASCII.
func ValidateIdempotencyKey(key string) *Error {
	if len(key) == 0 || len(key) > MaxIdempotencyKeyLen {
		return errorf(CodeInvalidIdempotencyKey, "Idempotency-Key must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return errorf(CodeInvalidIdempotencyKey, "Idempotency-Key must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLen)
		}
	}
	return nil
}

// CreateResult says what a create produced.
type CreateResult struct {
	Sandbox  View
	Replayed bool // an earlier request with the same Idempotency-Key made it
}

// Create validates the request, makes sure the image is there, records a
// pending sandbox and starts its container in the background.
func (m *Manager) Create(ctx context.Context, account, idemKey string, req CreateRequest) (CreateResult, error) {
	tpl, verr := m.validate(&req)
	if verr != nil {
		return CreateResult{}, verr
	}
	if idemKey == "" {
		return m.create(ctx, account, tpl, req, nil)
	}
	hash := requestHash(req)
	mapKey := account + "\x00" + idemKey

	m.mu.Lock()
	if e := m.idem[mapKey]; e != nil {
		defer m.mu.Unlock()
		switch {
		case e.rec.RequestHash != hash:
			return CreateResult{}, errorf(CodeIdempotencyKeyReused, "Idempotency-Key %q was used with a different request body; use a new key for a different request", idemKey)
		case !e.done:
			return CreateResult{}, &Error{Code: CodeIdempotencyInProgress, Message: "a request with this Idempotency-Key is still in progress; retry shortly", RetryAfter: 1}
		case e.rec.SandboxID == "":
			var replay Error
			if err := json.Unmarshal(e.rec.Body, &replay); err != nil || replay.Code == "" {
				return CreateResult{}, errorf(CodeInternal, "stored answer of Idempotency-Key %q is unreadable", idemKey)
			}
			return CreateResult{Replayed: true}, &replay
		default:
			if sb := m.boxes[e.rec.SandboxID]; sb != nil {
				return CreateResult{Sandbox: view(sb), Replayed: true}, nil
			}
			var v View
			if err := json.Unmarshal(e.rec.Body, &v); err != nil {
				return CreateResult{}, errorf(CodeInternal, "stored answer of Idempotency-Key %q is unreadable", idemKey)
			}
			return CreateResult{Sandbox: v, Replayed: true}, nil
		}
	}
	entry := &idemEntry{rec: store.Idempotency{Account: account, Key: idemKey, RequestHash: hash, CreatedAt: time.Now().UTC()}}
	m.idem[mapKey] = entry
	m.mu.Unlock()

	res, err := m.create(ctx, account, tpl, req, &entry.rec)

	m.mu.Lock()
	var apiErr *Error
	switch {
	case err == nil:
		entry.rec.SandboxID = res.Sandbox.ID
		entry.rec.Status = 201
		entry.rec.Body, _ = json.Marshal(res.Sandbox)
	case errors.As(err, &apiErr) && !retryable(apiErr.Code):
		// A client error spends the key: the same request would fail the
		// same way, and replaying it keeps the answer stable.
		entry.rec.Status = 400
		entry.rec.Body, _ = json.Marshal(apiErr)
	default:
		// Transient failures release the key so a retry can succeed.
		delete(m.idem, mapKey)
		m.mu.Unlock()
		return res, err
	}
	w := m.putIdempotencyLocked(&entry.rec)
	entry.done = true
	m.scheduleIdemExpiryLocked(mapKey, entry)
	m.trackKeyLocked(mapKey, entry)
	m.mu.Unlock()
	// A failure is logged by the writer; the sandbox's record carries the
	// key too, so a restart still replays it.
	_ = w.wait()
	return res, err
}

func retryable(code string) bool {
	// A full account is transient too: a delete frees capacity at once.
	return code == CodeServiceUnavailable || code == CodeInternal || code == CodeTooManyRequests || code == CodeVCPULimitExceeded ||
		code == CodeHostShareExceeded || code == CodeHostCapacityExhausted
}

// MarshalJSON lets a stored client error be replayed as it was.
func (e *Error) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Code          string `json:"code"`
		Message       string `json:"message"`
		Unprocessable bool   `json:"unprocessable,omitempty"`
	}{e.Code, e.Message, e.Unprocessable})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (e *Error) UnmarshalJSON(b []byte) error {
	var w struct {
		Code          string `json:"code"`
		Message       string `json:"message"`
		Unprocessable bool   `json:"unprocessable"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	e.Code, e.Message, e.Unprocessable = w.Code, w.Message, w.Unprocessable
	return nil
}

func requestHash(req CreateRequest) string {
	b, _ := json.Marshal(req) // maps marshal with sorted keys: stable
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (m *Manager) scheduleIdemExpiryLocked(mapKey string, e *idemEntry) {
	wait := time.Until(e.rec.CreatedAt.Add(m.cfg.IdempotencyTTL))
	e.expiry = time.AfterFunc(max(wait, 0), func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.idem[mapKey] == e && !m.closing {
			delete(m.idem, mapKey)
			m.untrackKeyLocked(e.rec.Account, mapKey)
			m.deleteIdempotencyLocked(e.rec.Account, e.rec.Key)
		}
	})
}

func (m *Manager) create(ctx context.Context, account string, tpl Template, req CreateRequest, idem *store.Idempotency) (CreateResult, error) {
	image := tpl.Image
	if req.Image != "" {
		image = req.Image
	}
	// A warm container is proof enough of the image and the engine (unless
	// the engine is known to be away, or was never reached): its claim
	// skips their two engine round trips, which on a host busy with
	// refills were a large part of a warm create.
	m.mu.Lock()
	warm := m.warmReadyLocked(tpl, req, image)
	m.mu.Unlock()
	if !warm || !m.engineTrusted() {
		if err := m.ensureImage(ctx, image); err != nil {
			return CreateResult{}, err
		}
	}
	sb := m.newRecord(account, tpl, image, req, idem)
	if m.immediate {
		if err := m.startImmediate(ctx, sb); err != nil {
			return CreateResult{}, err
		}
	}

	m.mu.Lock()
	err := m.checkCapacityLocked(account, tpl)
	if err == nil {
		err = m.checkHostCapacityLocked(account, tpl)
	}
	if err != nil {
		if sb.ContainerID != "" {
			m.removeLaterLocked(sb.ContainerID) // started at once (startImmediate)
		}
		m.mu.Unlock()
		if sb.LogBytes > 0 {
			m.dropLogs(sb.ID) // ran at once (startImmediate)
		}
		return CreateResult{}, err
	}
	if sb.Status == StatusPending {
		if claimed := m.claimLocked(sb.ID, tpl, req, image); claimed != "" {
			sb.Status, sb.ContainerID = StatusRunning, claimed
			m.startIdleClockLocked(sb, time.Now())
		}
	}
	// The record holds its capacity from here; it is written off the lock
	// and nothing of it starts before it is on disk.
	w := m.putSandboxLocked(sb)
	m.insertLocked(sb)
	m.scheduleLocked(sb)
	m.trimRetainedLocked(account) // a run-mode job started at once has ended
	v := view(sb)
	m.mu.Unlock()
	werr := w.wait()
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

// ensureImage makes the image present (a pull within PullTimeout when the
// policy allows one), once the engine answers, and one the runtime will
// run (IMAGE_NOT_ALLOWED, IMAGE_PLATFORM_MISMATCH otherwise).
func (m *Manager) ensureImage(ctx context.Context, image string) error {
	if err := m.EngineAvailable(ctx); err != nil {
		return err
	}
	pullCtx, cancel := context.WithTimeout(ctx, m.cfg.PullTimeout)
	err := m.rt.EnsureImage(pullCtx, image)
	cancel()
	if err != nil {
		if e := imageRefused(err); e != nil {
			return e
		}
		if errors.Is(err, container.ErrImageUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			// Not the runtime's text: it may carry what a registry or the
			// engine answered (issue 26).
			if errors.Is(err, context.DeadlineExceeded) {
				return errorf(CodeImagePullFailed, "image %q could not be pulled in time; try again shortly", image)
			}
			return errorf(CodeImagePullFailed, "image %q is not available: it is not on the engine and could not be pulled from its registry", image)
		}
		return m.mapRuntimeErr("", err)
	}
	return nil
}

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

// startAsyncLocked starts the sandbox's container in the background; the
// sandbox answers SANDBOX_NOT_READY until it runs.
func (m *Manager) startAsyncLocked(sb *store.Sandbox) {
	if m.starting[sb.ID] {
		return
	}
	m.starting[sb.ID] = true
	spec := m.specFor(sb)
	id, account := sb.ID, sb.Account
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		release, err := m.starts.acquire(m.ctx, account)
		if err != nil {
			m.started(id, "", err) // shutting down: the next start resumes it
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
		m.discardStart(id, cid, startErr)
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
		m.failStart(sb, "the sandbox could not start: "+startErr.Error())
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
		m.discardStart(id, cid, nil)
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

// discardStart removes what the start of a sandbox that was deleted or
// expired meanwhile made.
func (m *Manager) discardStart(id, cid string, startErr error) {
	if cid != "" || startErr == nil {
		_ = m.rt.Remove(context.Background(), ContainerName(id))
	}
	m.releaseEgress(id)
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
