package sandbox

import (
	"strconv"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Per-account capacity: the vCPUs of an account's live sandboxes (pending
// and running; exited and terminated ones hold nothing) may not exceed its
// limit, so one account cannot take the machine from every other. Warm-pool
// containers are not sandboxes and count for nobody; a sandbox frees its
// share the moment it ends or is deleted.

// DefaultVCPULimit is the per-account limit when none is configured: the
// smallest per-plan vCPU pool upstream.
const DefaultVCPULimit = 64

// CodeVCPULimitExceeded: a create would take the account past its vCPU limit (409).
const CodeVCPULimitExceeded = "VCPU_LIMIT_EXCEEDED"

// vcpuLimit is the account's limit.
func (m *Manager) vcpuLimit(account string) float64 {
	if l, ok := m.cfg.AccountVCPULimits[account]; ok && l > 0 {
		return l
	}
	return m.cfg.VCPULimit
}

// vcpusInUseLocked is the vCPUs of the account's live sandboxes, and of
// its admitted creates whose records are not in yet (their holds): a
// counter its index keeps as sandboxes are admitted, start, end and go
// (index.go), not a sum over records.
func (m *Manager) vcpusInUseLocked(account string) float64 {
	if a := m.accounts[account]; a != nil {
		return float64(a.liveMilli+a.heldMilli) / 1000
	}
	return 0
}

func (m *Manager) sandboxVCPU(sb *store.Sandbox) float64 {
	return m.templates[sb.Template].VCPU
}

// checkCapacityLocked refuses a sandbox that would take the account past
// its limit. It runs under the lock under which admission then holds the
// vCPUs it allowed (admitLocked, create_admit.go), so two creates at once
// cannot both take the last vCPUs.
func (m *Manager) checkCapacityLocked(account string, tpl Template) *Error {
	limit := m.vcpuLimit(account)
	used := m.vcpusInUseLocked(account)
	if used+tpl.VCPU <= limit+1e-9 {
		return nil
	}
	return errorf(CodeVCPULimitExceeded,
		"account %s is at its vCPU limit: its live sandboxes use %s of %s vCPUs and a %s sandbox needs %s more; delete sandboxes you no longer need (capacity frees at once) or ask for a higher limit",
		account, fmtVCPU(used), fmtVCPU(limit), tpl.Name, fmtVCPU(tpl.VCPU))
}

func fmtVCPU(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// VCPUUsage reports an account's limit and the vCPUs its live sandboxes use.
func (m *Manager) VCPUUsage(account string) (used, limit float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vcpusInUseLocked(account), m.vcpuLimit(account)
}
