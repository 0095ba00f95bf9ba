package sandbox

import (
	"math"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Per-account indexes, so that what one account asks for costs in its own
// records, never in everyone's: List reads the account's sandboxes only,
// and the capacity check reads a counter instead of adding up records.
// They are kept under m.mu beside m.boxes, by the few places that change
// it: insertLocked (a record enters m.boxes), reindexLocked (its status
// changed) and dropLocked (it leaves). Each record's entry remembers what
// it counted for, so that taking it out undoes exactly that. The host's
// totals over every account (m.live, m.liveAccounts) are kept the same
// way, for the host capacity check (hostcap.go) and the start queue's
// share (turnqueue.go); every change marks the account for the CPU
// weights (weights.go), which read its live sandboxes. Besides the
// records, an account's index counts the vCPUs admitted for its creates
// whose records are not in m.boxes yet (holdLocked, unholdLocked).

// accountIndex is what the manager knows of one account's records.
type accountIndex struct {
	boxes map[string]indexed // the account's sandboxes, by id
	// liveMilli is the vCPUs, in thousandths, of its pending and running
	// sandboxes: integers, so adding and taking away never drift.
	liveMilli int64
	// live is the memory and the number of its pending and running
	// sandboxes, and liveBoxes those sandboxes (weights.go reads them).
	live      liveUse
	liveBoxes map[string]*store.Sandbox
	// heldMilli is the vCPUs, in thousandths, held for its admitted
	// creates until their records count them (create_admit.go).
	heldMilli int64
	// ended holds its ended sandboxes' ids, oldest EndedAt first, and keys
	// its settled idempotency keys (as keys of m.idem), oldest first: what
	// the per-account caps forget first (caps.go).
	ended ageSet
	keys  ageSet
}

// liveUse is what live sandboxes hold of the host: memory and addresses.
type liveUse struct {
	mem   int64 // bytes, as sandboxMemory counts them
	count int
}

func (u *liveUse) add(v liveUse) { u.mem += v.mem; u.count += v.count }
func (u *liveUse) sub(v liveUse) { u.mem -= v.mem; u.count -= v.count }

// indexed is one record as its account's index counts it.
type indexed struct {
	sb        *store.Sandbox
	liveMilli int64   // what it adds to liveMilli (0 once it ended)
	live      liveUse // what it adds to live and m.live (zero once it ended)
}

func isLive(status string) bool { return status == StatusPending || status == StatusRunning }

// milliVCPU is a template's vCPUs in thousandths.
func milliVCPU(v float64) int64 { return int64(math.Round(v * 1000)) }

// accountLocked is the account's index, made when missing.
func (m *Manager) accountLocked(account string) *accountIndex {
	a := m.accounts[account]
	if a == nil {
		a = &accountIndex{boxes: map[string]indexed{}, liveBoxes: map[string]*store.Sandbox{}}
		m.accounts[account] = a
	}
	return a
}

// insertLocked puts a record into m.boxes and its account's index.
func (m *Manager) insertLocked(sb *store.Sandbox) {
	m.boxes[sb.ID] = sb
	m.reindexLocked(sb)
}

// reindexLocked brings the record's entry in its account's index up to
// date with its status; for a record not (or no longer) in m.boxes it
// does nothing.
func (m *Manager) reindexLocked(sb *store.Sandbox) {
	if m.boxes[sb.ID] != sb {
		return
	}
	a := m.accountLocked(sb.Account)
	old := a.boxes[sb.ID]
	e := indexed{sb: sb}
	if isLive(sb.Status) {
		e.liveMilli = milliVCPU(m.sandboxVCPU(sb))
		e.live = liveUse{mem: m.sandboxMemory(sb), count: 1}
	}
	before := a.live.count
	a.liveMilli += e.liveMilli - old.liveMilli
	a.live.sub(old.live)
	a.live.add(e.live)
	m.countLiveAccountLocked(before, a.live.count)
	m.live.sub(old.live)
	m.live.add(e.live)
	a.boxes[sb.ID] = e
	m.weighLocked(sb.Account)
	if isLive(sb.Status) {
		a.liveBoxes[sb.ID] = sb
		a.ended.remove(sb.ID)
		return
	}
	delete(a.liveBoxes, sb.ID)
	if !a.ended.has(sb.ID) {
		a.ended.add(sb.ID, endedAt(sb), m.nextSeqLocked())
	}
}

// hold is the vCPUs held for one admitted create, in its account's index.
type hold struct {
	account string
	milli   int64
}

// holdLocked holds milli thousandths of a vCPU for a create of account.
func (m *Manager) holdLocked(account string, milli int64) hold {
	m.accountLocked(account).heldMilli += milli
	return hold{account: account, milli: milli}
}

// unholdLocked gives a hold back. The account's index is still there: an
// index with a hold is never dropped.
func (m *Manager) unholdLocked(h hold) {
	m.accounts[h.account].heldMilli -= h.milli
	m.dropEmptyAccountLocked(h.account)
}

// unindexLocked takes the record out of its account's index.
func (m *Manager) unindexLocked(sb *store.Sandbox) {
	a := m.accounts[sb.Account]
	if a == nil {
		return
	}
	old, ok := a.boxes[sb.ID]
	if !ok {
		return
	}
	before := a.live.count
	a.liveMilli -= old.liveMilli
	a.live.sub(old.live)
	m.countLiveAccountLocked(before, a.live.count)
	m.live.sub(old.live)
	delete(a.boxes, sb.ID)
	delete(a.liveBoxes, sb.ID)
	a.ended.remove(sb.ID)
	m.weighLocked(sb.Account)
	m.dropEmptyAccountLocked(sb.Account)
}

// contended reports whether more than one account has live sandboxes:
// then starts and transfers take turns, transfers are paced and each
// account's CPUs are capped at its share. Read without m.mu.
func (m *Manager) contended() bool { return m.liveAccounts.Load() > 1 }

// countLiveAccountLocked keeps m.liveAccounts, the number of accounts
// with live sandboxes, as one account's count of them goes from before
// to after. The start queue reads it without m.mu (turnqueue.go).
func (m *Manager) countLiveAccountLocked(before, after int) {
	switch {
	case before == 0 && after > 0:
		if m.liveAccounts.Add(1) == 2 {
			m.weighAllLocked() // no longer alone: every account's CPU cap
		}
	case before > 0 && after == 0:
		if m.liveAccounts.Add(-1) == 1 {
			m.weighAllLocked() // the one left has the host to itself
		}
	}
}

// dropEmptyAccountLocked forgets the index of an account that has nothing
// left in it.
func (m *Manager) dropEmptyAccountLocked(account string) {
	if a := m.accounts[account]; a != nil && len(a.boxes) == 0 && a.keys.len() == 0 && a.heldMilli == 0 {
		delete(m.accounts, account)
	}
}
