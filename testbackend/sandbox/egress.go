package sandbox

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/egressname"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Egress control, an extension of API v1 (openapi.yaml marks it): a
// sandbox's outbound traffic is ALLOW_ALL (the default, as before),
// DENY_ALL (no connection and no name resolution) or ALLOW_LIST (only the
// addresses its allowed names resolved to, for the answers' TTL). The
// sandbox package validates and records the policy; an EgressEnforcer
// (package egress) puts it into the kernel, keyed on an address the
// sandbox gets before its container exists.

// Egress modes.
const (
	EgressAllowAll  = "ALLOW_ALL"
	EgressDenyAll   = "DENY_ALL"
	EgressAllowList = "ALLOW_LIST"
)

// MaxEgressAllowlist is the documented maximum number of allowlist entries.
const MaxEgressAllowlist = egressname.MaxAllowlist

// Error codes of egress control.
const (
	// CodeInvalidEgress: a bad egressMode or egressAllowlist (422).
	CodeInvalidEgress = "INVALID_EGRESS"
	// CodeEgressControlUnavailable: the backend runs without egress
	// control and the request asked for a mode other than ALLOW_ALL (400).
	CodeEgressControlUnavailable = "EGRESS_CONTROL_UNAVAILABLE"
)

// EgressPolicy is what an enforcer installs for one sandbox.
type EgressPolicy struct {
	SandboxID string
	IP        string   // the sandbox's IPv4 address on the sandbox network
	Mode      string   // EgressDenyAll or EgressAllowList
	Allowlist []string // ALLOW_LIST: host names and *.suffix wildcards
}

// EgressEnforcer puts egress policies into effect. Every method is safe for
// concurrent use.
type EgressEnforcer interface {
	// Available reports why egress control cannot be used ("" when it can).
	Available() string
	// ReserveIP picks a free address on the sandbox network for a sandbox
	// whose container does not exist yet. avoid lists addresses that just
	// proved taken.
	ReserveIP(ctx context.Context, avoid []string) (string, error)
	// Apply installs (or replaces) one sandbox's policy.
	Apply(ctx context.Context, p EgressPolicy) error
	// Release removes a sandbox's policy and everything it resolved; a
	// sandbox without one is no error.
	Release(ctx context.Context, sandboxID string) error
	// Sync replaces every policy of this backend with exactly these, at
	// once (backend start: rules are rebuilt from the records).
	Sync(ctx context.Context, ps []EgressPolicy) error
}

// egressRestricted reports whether a record has a policy to enforce.
func egressRestricted(sb *store.Sandbox) bool {
	return sb.EgressMode == EgressDenyAll || sb.EgressMode == EgressAllowList
}

// egressMode is the mode a record shows (records from before egress
// control have none: ALLOW_ALL).
func egressMode(sb *store.Sandbox) string {
	if sb.EgressMode == "" {
		return EgressAllowAll
	}
	return sb.EgressMode
}

func egressPolicy(sb *store.Sandbox) EgressPolicy {
	return EgressPolicy{SandboxID: sb.ID, IP: sb.EgressIP, Mode: sb.EgressMode, Allowlist: sb.EgressAllowlist}
}

// checkEgressAvailable refuses a restricted mode when this backend cannot
// enforce it, as upstream does for accounts without egress control. On a
// runtime that runs nothing (test mode) there is nothing to enforce.
func (m *Manager) checkEgressAvailable(mode string) *Error {
	if mode == EgressAllowAll || m.immediate {
		return nil
	}
	why := "egress control is turned off on this backend (--egress-control=off)"
	if m.cfg.Egress != nil {
		why = m.cfg.Egress.Available()
	}
	if why == "" {
		return nil
	}
	return errorf(CodeEgressControlUnavailable, "egressMode %s is not available: %s; omit egressMode (or use %s)", mode, why, EgressAllowAll)
}

// releaseEgress removes a sandbox's rules once its container is gone.
func (m *Manager) releaseEgress(id string) {
	if m.cfg.Egress == nil {
		return
	}
	if err := m.cfg.Egress.Release(context.WithoutCancel(m.ctx), id); err != nil {
		m.log.Warn("egress rules of an ended sandbox not removed; the next backend start drops them", "sandbox", id, "err", err)
	}
}

// syncEgress rebuilds every rule of this backend from the live records
// (pending and running sandboxes with a restricted mode and an address),
// and from the overdue ones whose containers are still to be removed.
func (m *Manager) syncEgress(ctx context.Context, overdue []*store.Sandbox) error {
	if m.cfg.Egress == nil || m.cfg.Egress.Available() != "" {
		return nil
	}
	m.mu.Lock()
	var ps []EgressPolicy
	for _, sb := range append(slices.Collect(maps.Values(m.boxes)), overdue...) {
		if egressRestricted(sb) && sb.EgressIP != "" && (sb.Status == StatusPending || sb.Status == StatusRunning) {
			ps = append(ps, egressPolicy(sb))
		}
	}
	m.mu.Unlock()
	if err := m.cfg.Egress.Sync(ctx, ps); err != nil {
		return fmt.Errorf("sandbox: restoring the egress rules of %d sandboxes: %w", len(ps), err)
	}
	return nil
}
