package sandbox

import (
	"context"
	"errors"
	"sync"
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
// A weight is a share of what is contended, not a bound: an account whose
// sandboxes are busy takes every CPU the others leave idle, so another
// account's command, which needs a CPU for a few milliseconds now and
// then, finds both taken by the busy account's sandboxes and waits its
// turn at every step. So while more than one account has live sandboxes,
// each account's running sandboxes together are also limited to its share
// of the host's CPUs, Config.HostShare of Config.HostCPUs (the share that
// bounds its memory, hostcap.go), less the host work of its starts
// (accountCPUCapLocked), split by their vCPUs as the weight is, each
// within its own vCPUs; an account alone on the host has every sandbox's
// full vCPUs again.
//
// With a runtime that weighs containers (container.CPUWeigher), a start
// begins at the weight and limit its account's live sandboxes leave it
// (startAsyncLocked),
// and one goroutine brings every running sandbox of an account to its
// weight and limit whenever a sandbox of the account starts or ends, or
// its places in the start share change, and every account's when the
// host goes from one account to more or back:
// the index (index.go) marks the accounts, and the weighing happens off
// m.mu.

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

// accountCPULimit is the CPU limit (1e-9 CPUs) of a sandbox of milli thousandths
// of a vCPU in an account whose live sandboxes have total, when the
// account may use most thousandths of the host's CPUs (0: its sandboxes'
// own limits).
func accountCPULimit(milli, total, most int64) int64 {
	if most > 0 && total > most {
		milli = milli * most / total
	}
	return max(milli, 1) * 1e6
}

// accountCPUCapLocked is the thousandths of the host's CPUs one account's
// sandboxes may use together now: while other accounts have live
// sandboxes, its share less the host work of its starts, counted for at
// least starting places in the start share (a start about to go in holds
// one); 0 (no cap but each sandbox's own) while it is alone.
//
// A start keeps most of a CPU of the host busy while it runs, outside
// every sandbox's cgroup: the engine, the runtime's own calls, the
// network's wiring. While other accounts are on the host, an account's
// place in the start share runs starts at most Config.StartDuty of the
// time, resting the rest (turnqueue.go). So each place it holds, running
// or resting, counts StartDuty of a CPU against its share, never more
// than half of it: its sandboxes and the host work done to start them
// together stay within the share, and what another account's commands
// need of the host is left to them.
func (m *Manager) accountCPUCapLocked(account string, starting int) int64 {
	if !m.contended() {
		return 0
	}
	share := max(1, int64(m.cfg.HostShare*float64(m.cfg.HostCPUs)*1000))
	work := int64(max(m.starts.held(account), starting)) * int64(m.cfg.StartDuty*1000)
	return max(share-work, (share+1)/2)
}

// cpuShare is what a running container was given: its weight and limit.
type cpuShare struct {
	weight int
	nano   int64
}

// weights keeps the running sandboxes' CPU weights and limits.
type weights struct {
	rt   container.CPUWeigher
	kick chan struct{} // one pending wake-up of the weighing goroutine
	// dirty holds the accounts whose weights may have changed; under m.mu.
	dirty map[string]bool
	// set is each account's containers and what each was given, and off
	// says the runtime cannot weigh here (container.ErrCannotWeigh, said
	// once): the weighing goroutine's own.
	set map[string]map[string]cpuShare
	off bool
	// total is the weight all containers were given together, 0 before
	// the first; totalOff says the runtime cannot weigh them together
	// (said once). The weighing goroutine's own.
	total    int
	totalOff bool
	// placed holds the accounts whose places in the start share changed
	// (startPlacesChanged), under its own lock: the start queue tells it
	// under the queue's, which m.mu is taken before.
	placedMu sync.Mutex
	placed   map[string]bool
}

func newWeights(rt container.Runtime) *weights {
	w, ok := rt.(container.CPUWeigher)
	if !ok {
		return nil
	}
	return &weights{rt: w, kick: make(chan struct{}, 1), dirty: map[string]bool{}, set: map[string]map[string]cpuShare{}, placed: map[string]bool{}}
}

// weighLocked marks the account's weights for the weighing goroutine.
func (m *Manager) weighLocked(account string) {
	if m.weights == nil {
		return
	}
	m.weights.dirty[account] = true
	m.weights.wake()
}

// startPlacesChanged marks the account's weights for the weighing
// goroutine: its places in the start share, which count against its CPU
// share, changed. The start queue calls it under its lock.
func (m *Manager) startPlacesChanged(account string) {
	if m.weights == nil {
		return
	}
	m.weights.placedMu.Lock()
	m.weights.placed[account] = true
	m.weights.placedMu.Unlock()
	m.weights.wake()
}

// wake leaves the weighing goroutine one pending wake-up.
func (w *weights) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// weighAllLocked marks every account's weights: the host went from one
// account with live sandboxes to more, or back, which moves their limits.
func (m *Manager) weighAllLocked() {
	for account := range m.accounts {
		m.weighLocked(account)
	}
}

// startCPULocked is the weight and limit a start of sb begins with: its
// part of its account's live sandboxes, sb among them; 0 and the
// template's own limit where the runtime does not weigh.
func (m *Manager) startCPULocked(sb *store.Sandbox, nano int64) (int, int64) {
	if m.weights == nil {
		return 0, nano
	}
	milli := milliVCPU(m.sandboxVCPU(sb))
	total := milli
	if a := m.accounts[sb.Account]; a != nil && a.boxes[sb.ID].sb == sb {
		total = a.liveMilli
	}
	return cpuWeight(milli, total), min(nano, accountCPULimit(milli, total, m.accountCPUCapLocked(sb.Account, 1)))
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
		m.weights.placedMu.Lock()
		for account := range m.weights.placed {
			m.weights.dirty[account] = true
		}
		clear(m.weights.placed)
		m.weights.placedMu.Unlock()
		want := make(map[string]map[string]cpuShare, len(m.weights.dirty))
		for account := range m.weights.dirty {
			want[account] = m.accountSharesLocked(account)
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

// accountSharesLocked is the weight and limit each running sandbox of
// the account should have, by container.
func (m *Manager) accountSharesLocked(account string) map[string]cpuShare {
	a := m.accounts[account]
	if a == nil {
		return nil
	}
	most := m.accountCPUCapLocked(account, 0)
	ws := map[string]cpuShare{}
	for id, sb := range a.liveBoxes {
		if sb.Status == StatusRunning && sb.ContainerID != "" {
			milli := a.boxes[id].liveMilli
			ws[sb.ContainerID] = cpuShare{weight: cpuWeight(milli, a.liveMilli), nano: accountCPULimit(milli, a.liveMilli, most)}
		}
	}
	return ws
}

// applyWeights gives the account's containers their weights and limits,
// changing only what changed.
func (m *Manager) applyWeights(account string, ws map[string]cpuShare) {
	had := m.weights.set[account]
	for cid, w := range ws {
		var err error
		if had[cid].weight != w.weight {
			ctx, cancel := context.WithTimeout(m.ctx, weightTimeout)
			err = m.weights.rt.SetCPUWeight(ctx, cid, w.weight)
			cancel()
		}
		if err == nil && had[cid].nano != w.nano {
			ctx, cancel := context.WithTimeout(m.ctx, weightTimeout)
			err = m.weights.rt.SetCPULimit(ctx, cid, w.nano)
			cancel()
		}
		switch {
		case err == nil, errors.Is(err, container.ErrNotFound), errors.Is(err, container.ErrNotRunning):
			// Gone meanwhile: its end marks the account again.
		case m.ctx.Err() != nil:
			return
		case errors.Is(err, container.ErrCannotWeigh):
			m.log.Warn("sandboxes' CPU is not weighed by account: every busy sandbox gets an equal share of a contended host, up to its own vCPUs", "err", err)
			m.weights.off = true
			return
		default:
			m.log.Warn("CPU weight or limit not set; the container keeps them until its account's sandboxes change", "account", account, "container", cid, "weight", w.weight, "limit", w.nano, "err", err)
			delete(ws, cid) // tried again at the next change
		}
	}
	if len(ws) == 0 {
		delete(m.weights.set, account)
		return
	}
	m.weights.set[account] = ws
}
