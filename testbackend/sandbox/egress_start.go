package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
)

// startWithEgress starts a sandbox's container. A restricted sandbox gets
// its address and rules first: the address is chosen here, the rules keyed
// on it are installed, the record keeps it (so a restart restores them),
// and only then does the container start with that address. Nothing of the
// sandbox, neither a run-mode program nor the first command, ever runs
// without its policy, and no window exists between "container up" and
// "rules in place".
func (m *Manager) startWithEgress(id string, spec container.Spec) (string, error) {
	m.mu.Lock()
	sb := m.boxes[id]
	if sb == nil || !egressRestricted(sb) {
		m.mu.Unlock()
		return m.startContainer(spec)
	}
	pol := egressPolicy(sb)
	m.mu.Unlock()
	if m.cfg.Egress == nil || m.cfg.Egress.Available() != "" {
		// Refused at create; reaching this means the backend restarted
		// without egress control: never start the sandbox unrestricted.
		why := "egress control is turned off"
		if m.cfg.Egress != nil {
			why = m.cfg.Egress.Available()
		}
		return "", fmt.Errorf("sandbox has egressMode %s but this backend cannot enforce it: %s", pol.Mode, why)
	}

	var avoid []string
	for attempt := 0; ; attempt++ {
		ip := pol.IP
		if ip == "" || attempt > 0 {
			var err error
			ip, err = m.cfg.Egress.ReserveIP(m.ctx, avoid)
			if err != nil {
				return "", fmt.Errorf("egress: no address for the sandbox: %w", err)
			}
		}
		pol.IP = ip
		if err := m.cfg.Egress.Apply(m.ctx, pol); err != nil {
			return "", fmt.Errorf("egress: installing the sandbox's rules: %w", err)
		}
		failpoint.Hit(failpoint.EgressApplied)
		m.mu.Lock()
		var w *recordWrite
		if cur := m.boxes[id]; cur == sb {
			sb.EgressIP = ip
			w = m.putSandboxLocked(sb)
		}
		m.mu.Unlock()
		if w != nil {
			// On disk before the container starts: a restart restores its rules.
			if err := w.wait(); err != nil {
				return "", errorf(CodeInternal, "could not save sandbox %s: %v", id, err)
			}
		}
		spec.IPv4 = ip
		cid, err := m.startContainer(spec)
		if err == nil || attempt == 4 || !addressTaken(err) {
			return cid, err
		}
		m.log.Info("sandbox address taken meanwhile; choosing another", "sandbox", id, "ip", ip)
		avoid = append(avoid, ip)
		_ = m.cfg.Egress.Release(context.WithoutCancel(m.ctx), id)
	}
}

// addressTaken recognises the engine's answer to a fixed address in use.
func addressTaken(err error) bool {
	return err != nil && !errors.Is(err, container.ErrEngineUnavailable) &&
		(strings.Contains(err.Error(), "Address already in use") || strings.Contains(err.Error(), "address already in use"))
}
