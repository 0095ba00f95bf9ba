package sandbox

import (
	"context"
	"errors"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Per-account CPU weights. A sandbox's vCPUs are a limit (its CPU quota),
// not a share: left alone the kernel gives every busy container the same
// share of a contended host, so an account running 64 busy sandboxes
// would take 64 shares to another account's one. Instead each account's
// live sandboxes share one weight, AccountCPUWeight, split by their vCPUs:
// when the host's CPUs are contended the accounts get equal parts of
// them, however many sandboxes each runs, and within an account each
// sandbox gets its vCPUs' part; an uncontended host still gives every
// sandbox up to its limit. Host processes (the backend, the engine) keep
// the kernel's default weight each; where the runtime can weigh all its
// containers together (under a parent cgroup of their own), they weigh as
// many host processes as there are accounts with running sandboxes, so
// each account weighs as one host process (applyTotalWeight).
//
// With a runtime that weighs containers (container.CPUWeigher), a start
// begins at the weight its account's live sandboxes leave it
// (startAsyncLocked),
// and one goroutine brings every running sandbox of an account to its
// weight whenever a sandbox of the account starts or ends: the index
// (index.go) marks the account, and the weighing happens off m.mu.

// AccountCPUWeight is what all of one account's sandboxes weigh together:
// the kernel's default for one container.
const AccountCPUWeight = container.DefaultCPUWeight

// weightTimeout bounds one weight change.
const weightTimeout = 10 * time.Second

// cpuWeight is the weight of a sandbox of milli thousandths of a vCPU in
// an account whose live sandboxes have total.
func cpuWeight(milli, total int64) int {
	if total <= 0 || milli >= total {
		return AccountCPUWeight
	}
	return max(container.MinCPUWeight, int(AccountCPUWeight*milli/total))
}

// weights keeps the running sandboxes' CPU weights.
type weights struct {
	rt   container.CPUWeigher
	kick chan struct{} // one pending wake-up of the weighing goroutine
	// dirty holds the accounts whose weights may have changed; under m.mu.
	dirty map[string]bool
	// set is each account's containers and the weight each was given,
	// and off says the runtime cannot weigh here (container.ErrCannotWeigh,
	// said once): the weighing goroutine's own.
	set map[string]map[string]int
	off bool
	// total is the weight all containers were given together, 0 before
	// the first; totalOff says the runtime cannot weigh them together
	// (said once). The weighing goroutine's own.
	total    int
	totalOff bool
}

func newWeights(rt container.Runtime) *weights {
	w, ok := rt.(container.CPUWeigher)
	if !ok {
		return nil
	}
	return &weights{rt: w, kick: make(chan struct{}, 1), dirty: map[string]bool{}, set: map[string]map[string]int{}}
}

// weighLocked marks the account's weights for the weighing goroutine.
func (m *Manager) weighLocked(account string) {
	if m.weights == nil {
		return
	}
	m.weights.dirty[account] = true
	select {
	case m.weights.kick <- struct{}{}:
	default:
	}
}

// startWeightLocked is the weight a start of sb begins with: its part of its
// account's live sandboxes, sb among them.
func (m *Manager) startWeightLocked(sb *store.Sandbox) int {
	if m.weights == nil {
		return 0
	}
	milli := milliVCPU(m.sandboxVCPU(sb))
	total := milli
	if a := m.accounts[sb.Account]; a != nil && a.boxes[sb.ID].sb == sb {
		total = a.liveMilli
	}
	return cpuWeight(milli, total)
}

// weighLoop is the weighing goroutine, started by Start.
func (m *Manager) weighLoop() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.weights.kick:
		}
		m.mu.Lock()
		want := make(map[string]map[string]int, len(m.weights.dirty))
		for account := range m.weights.dirty {
			want[account] = m.accountWeightsLocked(account)
		}
		clear(m.weights.dirty)
		m.mu.Unlock()
		if m.weights.off {
			continue
		}
		for account, ws := range want {
			m.applyWeights(account, ws)
		}
		m.applyTotalWeight()
	}
}

// totalCPUWeight is what the running sandboxes of accounts accounts weigh
// together.
func totalCPUWeight(accounts int) int {
	return min(max(accounts, 1)*AccountCPUWeight, container.MaxCPUWeight)
}

// applyTotalWeight gives all running containers together the weight of
// the accounts they belong to, when that changed.
func (m *Manager) applyTotalWeight() {
	w := totalCPUWeight(len(m.weights.set))
	if m.weights.off || m.weights.totalOff || len(m.weights.set) == 0 || w == m.weights.total {
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, weightTimeout)
	err := m.weights.rt.SetTotalCPUWeight(ctx, w)
	cancel()
	switch {
	case err == nil:
		m.weights.total = w
	case m.ctx.Err() != nil:
	case errors.Is(err, container.ErrCannotWeigh):
		m.log.Warn("sandboxes are not weighed together: all of them weigh as one host process against the backend's and the engine's", "err", err)
		m.weights.totalOff = true
	default:
		m.log.Warn("CPU weight of the sandboxes together not set; tried again when an account's sandboxes change", "weight", w, "err", err)
	}
}

// accountWeightsLocked is the weight each running sandbox of the account
// should have, by container.
func (m *Manager) accountWeightsLocked(account string) map[string]int {
	a := m.accounts[account]
	if a == nil {
		return nil
	}
	ws := map[string]int{}
	for id, sb := range a.liveBoxes {
		if sb.Status == StatusRunning && sb.ContainerID != "" {
			ws[sb.ContainerID] = cpuWeight(a.boxes[id].liveMilli, a.liveMilli)
		}
	}
	return ws
}

// applyWeights gives the account's containers their weights, changing
// only those whose weight changed.
func (m *Manager) applyWeights(account string, ws map[string]int) {
	had := m.weights.set[account]
	for cid, w := range ws {
		if had[cid] == w {
			continue
		}
		ctx, cancel := context.WithTimeout(m.ctx, weightTimeout)
		err := m.weights.rt.SetCPUWeight(ctx, cid, w)
		cancel()
		switch {
		case err == nil, errors.Is(err, container.ErrNotFound), errors.Is(err, container.ErrNotRunning):
			// Gone meanwhile: its end marks the account again.
		case m.ctx.Err() != nil:
			return
		case errors.Is(err, container.ErrCannotWeigh):
			m.log.Warn("sandboxes' CPU is not weighed by account: every busy sandbox gets an equal share of a contended host", "err", err)
			m.weights.off = true
			return
		default:
			m.log.Warn("CPU weight not set; the container keeps its weight until its account's sandboxes change", "account", account, "container", cid, "weight", w, "err", err)
			delete(ws, cid) // tried again at the next change
		}
	}
	if len(ws) == 0 {
		delete(m.weights.set, account)
		return
	}
	m.weights.set[account] = ws
}
