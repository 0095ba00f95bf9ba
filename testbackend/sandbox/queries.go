package sandbox

import (
	"context"
	"slices"
	"sort"
)

// Get returns one of the account's sandboxes. Another account's sandbox is
// not found, exactly like one that does not exist.
func (m *Manager) Get(account, id string) (View, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.boxes[id]
	if sb == nil || sb.Account != account {
		return View{}, notFound(id)
	}
	return view(sb), nil
}

// List returns the account's sandboxes that carry every given label,
// oldest first. It reads the account's own records (index.go), never
// every account's; they are sorted off the lock.
func (m *Manager) List(account string, labels map[string]string) []View {
	m.mu.Lock()
	out := []View{}
	if a := m.accounts[account]; a != nil {
		for _, e := range a.boxes {
			if hasLabels(e.sb.Labels, labels) {
				out = append(out, view(e.sb))
			}
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt < out[j].CreatedAt
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// notifyLocked wakes everyone waiting for the sandbox's status to change.
func (m *Manager) notifyLocked(id string) {
	if ch := m.changed[id]; ch != nil {
		close(ch)
		delete(m.changed, id)
	}
}

// WaitStatus waits until the sandbox has one of the statuses, has ended,
// or is gone, or until ctx ends, and returns it as it then is. The wait is
// an event: every status change closes a channel, nothing polls.
func (m *Manager) WaitStatus(ctx context.Context, account, id string, want []string) (View, error) {
	for {
		m.mu.Lock()
		sb := m.boxes[id]
		if sb == nil || sb.Account != account {
			m.mu.Unlock()
			return View{}, notFound(id)
		}
		if slices.Contains(want, sb.Status) || sb.Status == StatusExited || sb.Status == StatusTerminated {
			v := view(sb)
			m.mu.Unlock()
			return v, nil
		}
		ch := m.changed[id]
		if ch == nil {
			ch = make(chan struct{})
			m.changed[id] = ch
		}
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return m.Get(account, id)
		}
	}
}
