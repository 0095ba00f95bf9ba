package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Termination reasons: why a sandbox ended with status terminated. They
// are part of the API contract (openapi.yaml and the README list them);
// terminationMessage carries the detail.
const (
	ReasonIdleTimeout   = "idle_timeout"   // no activity for idleTimeoutMs
	ReasonOutOfMemory   = "out_of_memory"  // the engine killed it at the template's memory limit
	ReasonContainerLost = "container_lost" // its container was killed or removed from outside the backend
	ReasonEngineLost    = "engine_lost"    // its container went while the container engine was away
	ReasonAgentFailure  = "agent_failure"  // the control channel to the sandbox broke or turned hostile
	ReasonProcessEnded  = "process_ended"  // the keepalive ended for another reason
	ReasonStartFailed   = "start_failed"   // the container could not be started
)

// TerminationReasons lists every reason, in documentation order.
var TerminationReasons = []string{ReasonIdleTimeout, ReasonOutOfMemory, ReasonContainerLost, ReasonEngineLost, ReasonAgentFailure, ReasonProcessEnded, ReasonStartFailed}

// Limits of idleTimeoutMs (an extension of v1): 0 or omitted is off,
// 1 to the minimum is raised to the minimum, above MaxTimeoutMs is
// clamped.
const DefaultMinIdleTimeout = 90 * time.Second

// UpdateRequest is the body of PATCH /v1/sandboxes/{id}. The fields stay
// raw so that a value of the wrong type is a bad value (422), not a
// malformed request.
type UpdateRequest struct {
	TimeoutMs     json.RawMessage `json:"timeoutMs,omitempty"`
	IdleTimeoutMs json.RawMessage `json:"idleTimeoutMs,omitempty"`
}

// present says whether a raw field was sent with a value (null is absent).
func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

var maxInt64 = big.NewInt(1<<63 - 1)

// parseMs reads an integer number of milliseconds. Values beyond int64
// come back as MaxInt64 (they are clamped anyway); anything but an integer
// is refused.
func parseMs(field string, raw json.RawMessage) (int64, *Error) {
	s := strings.TrimSpace(string(raw))
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || strings.HasPrefix(s, "+") {
		return 0, invalidValue("%s must be an integer number of milliseconds, got %s", field, shorten(s, 40))
	}
	if n.Cmp(maxInt64) > 0 {
		return 1<<63 - 1, nil
	}
	if n.Sign() < 0 {
		return 0, invalidValue("%s must not be negative, got %s", field, shorten(s, 40))
	}
	return n.Int64(), nil
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// invalidValue is a well-formed request with a value out of range:
// INVALID_TIMEOUT, answered with 422 as the extensions document.
func invalidValue(format string, args ...any) *Error {
	e := errorf(CodeInvalidTimeout, format, args...)
	e.Unprocessable = true
	return e
}

// idleTimeout reads idleTimeoutMs: 0 is off; 1 up to the minimum is
// raised to it; above MaxTimeoutMs is clamped.
func (m *Manager) idleTimeout(raw json.RawMessage) (int64, *Error) {
	if !present(raw) {
		return 0, nil
	}
	ms, err := parseMs("idleTimeoutMs", raw)
	if err != nil {
		return 0, err
	}
	minMs := m.cfg.MinIdleTimeout.Milliseconds()
	switch {
	case ms == 0:
		return 0, nil
	case ms < minMs:
		return minMs, nil
	case ms > MaxTimeoutMs:
		return MaxTimeoutMs, nil
	}
	return ms, nil
}

// Update changes the lifetime and idle timeout of a running sandbox
// (PATCH). The lifetime still counts from createdAt; the timers move and
// the change is on disk before the answer.
func (m *Manager) Update(account, id string, req UpdateRequest) (View, error) {
	if !present(req.TimeoutMs) && !present(req.IdleTimeoutMs) {
		return View{}, errorf(CodeInvalidRequest, "send timeoutMs, idleTimeoutMs or both")
	}
	var timeoutMs int64
	if present(req.TimeoutMs) {
		ms, err := parseMs("timeoutMs", req.TimeoutMs)
		if err != nil {
			return View{}, err
		}
		if ms == 0 {
			return View{}, invalidValue("timeoutMs must be greater than 0")
		}
		timeoutMs = min(ms, MaxTimeoutMs)
	}
	idleMs, verr := m.idleTimeout(req.IdleTimeoutMs)
	if verr != nil {
		return View{}, verr
	}

	v, w, err := m.patchLocked(account, id, timeoutMs, idleMs, present(req.IdleTimeoutMs))
	if err != nil {
		return View{}, err
	}
	// The answer waits until the record is on disk (the lock is not held
	// meanwhile), so a PATCH that answered 200 survives a crash. If the
	// write fails the change still holds in memory and goes to disk with
	// the record's next write; the caller is told it was not saved.
	if err := w.wait(); err != nil {
		return View{}, errorf(CodeInternal, "could not save sandbox %s: %v", id, err)
	}
	failpoint.Hit(failpoint.PatchRecorded)
	return v, nil
}

// patchLocked applies a PATCH to a running sandbox under the manager's
// lock and hands the record to the writer.
func (m *Manager) patchLocked(account, id string, timeoutMs, idleMs int64, setIdle bool) (View, *recordWrite, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.boxes[id]
	if sb == nil || sb.Account != account {
		return View{}, nil, notFound(id)
	}
	if sb.Status != StatusRunning || m.expiring[id] {
		return View{}, nil, errorf(CodeNotRunning, "sandbox %s is not running (status %s); only a running sandbox can change its timeouts", id, sb.Status)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	upd := *sb
	if timeoutMs > 0 {
		exp := upd.CreatedAt.Add(time.Duration(timeoutMs) * time.Millisecond)
		if !exp.After(now) {
			age := now.Sub(upd.CreatedAt)
			return View{}, nil, invalidValue("timeoutMs %d ends the lifetime of sandbox %s in the past: it was created %d ms ago (at %s) and the lifetime counts from then; send more than %d", timeoutMs, id, age.Milliseconds(), upd.CreatedAt.UTC().Format(TimeFormat), age.Milliseconds())
		}
		upd.TimeoutMs, upd.ExpiresAt = timeoutMs, exp
	}
	if setIdle {
		upd.IdleTimeoutMs = idleMs
		m.startIdleClockLocked(&upd, now)
	}
	*sb = upd
	w := m.putSandboxLocked(sb)
	m.scheduleLocked(sb)
	return view(sb), w, nil
}

// startIdleClockLocked starts the idle clock of a sandbox that has just
// started running. A run-mode program is activity for as long as it runs:
// the idle timeout never ends a job.
func (m *Manager) startIdleClockLocked(sb *store.Sandbox, now time.Time) {
	if sb.IdleTimeoutMs <= 0 || sb.RunMode {
		sb.IdleExpiresAt = nil
		return
	}
	t := now.UTC().Truncate(time.Millisecond).Add(time.Duration(sb.IdleTimeoutMs) * time.Millisecond)
	sb.IdleExpiresAt = &t
}

// touchLocked counts activity: the idle clock starts again from now.
func (m *Manager) touchLocked(sb *store.Sandbox) {
	if sb.Status != StatusRunning || sb.IdleExpiresAt == nil {
		return
	}
	t := time.Now().UTC().Truncate(time.Millisecond).Add(time.Duration(sb.IdleTimeoutMs) * time.Millisecond)
	if sb.IdleExpiresAt == nil || t.After(*sb.IdleExpiresAt) {
		sb.IdleExpiresAt = &t
	}
}

// activity marks an operation on the caller's sandbox (a command,
// run_code, a file read or write) as under way: the idle clock starts
// again now, cannot run out while the operation runs, and starts again
// when it ends. Call the returned func at the end. Another account's
// request counts for nothing.
func (m *Manager) activity(account, id string) func() {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.boxes[id]
	if sb == nil || sb.Account != account {
		return func() {}
	}
	m.busy[id]++
	m.touchLocked(sb)
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.busy[id]--; m.busy[id] <= 0 {
			delete(m.busy, id)
		}
		m.refillOwedLocked(id) // the first operation has answered: the pool may refill (pool.go)
		if live := m.boxes[id]; live == sb {
			m.touchLocked(sb)
			if sb.Status == StatusRunning && !m.expiring[id] {
				m.scheduleLocked(sb) // the idle clock may have run out meanwhile
			}
		}
	}
}

// idleDue says whether the sandbox's idle clock, not its lifetime,
// has run out.
func idleDue(sb *store.Sandbox, now time.Time) bool {
	return sb.Status == StatusRunning && sb.IdleExpiresAt != nil && !sb.IdleExpiresAt.After(now) && sb.ExpiresAt.After(now)
}

// endIdle ends a sandbox whose idle clock ran out: its container goes,
// and it stays readable as terminated (idle_timeout) for the retention
// period. The caller has set expiring[id].
func (m *Manager) endIdle(sb *store.Sandbox) {
	id := sb.ID
	m.log.Info("sandbox idle timeout", "sandbox", id, "idleTimeoutMs", sb.IdleTimeoutMs)
	msg := "the sandbox had no activity (commands, run_code, file reads or writes, log reads) for its idle timeout of " + (time.Duration(sb.IdleTimeoutMs) * time.Millisecond).String()
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	if err := m.removeContainer(ctx, sb); err != nil {
		m.log.Warn("idle sandbox's container not removed; the next reconciliation removes it", "sandbox", id, "err", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.expiring, id)
	if m.boxes[id] == sb && sb.Status == StatusRunning {
		m.endLocked(sb, StatusTerminated, nil, ReasonIdleTimeout, msg, 0)
	}
}

// legacyReason classifies a record written when terminationReason was
// free text: the text becomes the message.
func legacyReason(sb *store.Sandbox) {
	if sb.TerminationReason == "" || sb.TerminationMessage != "" {
		return
	}
	for _, r := range TerminationReasons {
		if sb.TerminationReason == r {
			return
		}
	}
	msg := sb.TerminationReason
	sb.TerminationMessage = msg
	switch {
	case strings.Contains(msg, "could not start"):
		sb.TerminationReason = ReasonStartFailed
	case strings.Contains(msg, "was lost"):
		sb.TerminationReason = ReasonContainerLost
	case strings.Contains(msg, "agent"):
		sb.TerminationReason = ReasonAgentFailure
	default:
		sb.TerminationReason = ReasonProcessEnded
	}
}

// terminationCause classifies how a sandbox's keepalive ended.
func (m *Manager) terminationCause(sb *store.Sandbox, exit container.Exit) (reason, message string) {
	switch {
	case exit.Reason != "":
		return ReasonAgentFailure, exit.Reason
	case exit.OOMKilled:
		return ReasonOutOfMemory, fmt.Sprintf("the sandbox used more memory than its template %s allows (%d MiB) and was killed", sb.Template, m.templates[sb.Template].MemoryMB)
	case exit.Removed:
		return ReasonContainerLost, "the sandbox's container was removed from outside the backend"
	case exit.Killed:
		return ReasonContainerLost, fmt.Sprintf("the sandbox's container was killed from outside the backend (through the container engine; exit code %d)", exit.Code)
	case exit.EngineLost:
		return ReasonEngineLost, fmt.Sprintf("the sandbox's container stopped while the container engine at %s was unavailable (it crashed or restarted; exit code %d)", m.rt.Address(), exit.Code)
	}
	return ReasonProcessEnded, fmt.Sprintf("the sandbox's main process ended with code %d", exit.Code)
}
