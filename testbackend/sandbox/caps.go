package sandbox

import (
	"container/heap"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Per-account caps on what is kept after the work is done, so that one
// account cannot fill the backend's memory and disk with records:
//
//   - MaxRetainedPerAccount ended (exited or terminated) sandboxes. Past
//     it, the account's oldest ended sandboxes, by EndedAt, are forgotten
//     before their retention ends: record and log file deleted, the id
//     answers 404 as after a DELETE. Live sandboxes never count.
//   - MaxIdempotencyKeysPerAccount idempotency keys whose create has
//     answered. Past it the oldest keys, by when their first request came,
//     are forgotten before their TTL: a create that sends one again makes
//     a new sandbox. Keys in flight are bounded by the account's requests
//     in flight instead.
//
// Both are applied as records come (an end, a settled key) and at start.

// Defaults of the caps.
const (
	DefaultMaxRetainedPerAccount        = 1000
	DefaultMaxIdempotencyKeysPerAccount = 10000
)

// ageItem is one member of an ageSet.
type ageItem struct {
	key   string
	at    time.Time
	seq   uint64 // ties on at go by arrival
	index int    // in the heap
}

// ageHeap is a min-heap of items, oldest first.
type ageHeap []*ageItem

func (h ageHeap) Len() int { return len(h) }
func (h ageHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h ageHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *ageHeap) Push(x any) {
	it, ok := x.(*ageItem)
	if !ok {
		panic("ageHeap: push of a non-item")
	}
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *ageHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// ageSet is a set of keys that yields its oldest first: adding, removing
// and finding the oldest cost O(log n) in the account's own members.
type ageSet struct {
	items map[string]*ageItem
	h     ageHeap
}

func (s *ageSet) len() int { return len(s.h) }

func (s *ageSet) has(key string) bool { return s.items[key] != nil }

// add puts key in the set; one already in it keeps its place.
func (s *ageSet) add(key string, at time.Time, seq uint64) {
	if s.items == nil {
		s.items = map[string]*ageItem{}
	}
	if s.items[key] != nil {
		return
	}
	it := &ageItem{key: key, at: at, seq: seq}
	s.items[key] = it
	heap.Push(&s.h, it)
}

func (s *ageSet) remove(key string) {
	it := s.items[key]
	if it == nil {
		return
	}
	heap.Remove(&s.h, it.index)
	delete(s.items, key)
}

// oldest is the oldest key; the set must not be empty.
func (s *ageSet) oldest() string { return s.h[0].key }

func (m *Manager) nextSeqLocked() uint64 {
	m.seq++
	return m.seq
}

// endedAt orders ended sandboxes; records without EndedAt (older ones)
// count from their creation.
func endedAt(sb *store.Sandbox) time.Time {
	if sb.EndedAt != nil {
		return *sb.EndedAt
	}
	return sb.CreatedAt
}

// trimRetainedLocked forgets the account's oldest ended sandboxes while it
// has more than MaxRetainedPerAccount, as a DELETE would: the record (and
// its log file) first, then in the background what may be left of its
// container and egress rules.
func (m *Manager) trimRetainedLocked(account string) {
	for {
		a := m.accounts[account]
		if a == nil || a.ended.len() <= m.cfg.MaxRetainedPerAccount {
			return
		}
		sb := a.boxes[a.ended.oldest()].sb
		m.log.Info("forgetting an ended sandbox before its retention ends: its account is past its cap on retained sandboxes",
			"sandbox", sb.ID, "account", account, "cap", m.cfg.MaxRetainedPerAccount)
		m.forgetLocked(sb) // a failed delete is logged by the writer
		m.removeDeletedLocked(sb)
	}
}

// trackKeyLocked counts a settled idempotency key against its account's
// cap and forgets the account's oldest keys past it.
func (m *Manager) trackKeyLocked(mapKey string, e *idemEntry) {
	m.accountLocked(e.rec.Account).keys.add(mapKey, e.rec.CreatedAt, m.nextSeqLocked())
	m.trimKeysLocked(e.rec.Account)
}

// untrackKeyLocked takes a forgotten key out of its account's count.
func (m *Manager) untrackKeyLocked(account, mapKey string) {
	if a := m.accounts[account]; a != nil {
		a.keys.remove(mapKey)
		m.dropEmptyAccountLocked(account)
	}
}

// trimKeysLocked forgets the account's oldest settled keys while it has
// more than MaxIdempotencyKeysPerAccount.
func (m *Manager) trimKeysLocked(account string) {
	for {
		a := m.accounts[account]
		if a == nil || a.keys.len() <= m.cfg.MaxIdempotencyKeysPerAccount {
			return
		}
		mapKey := a.keys.oldest()
		a.keys.remove(mapKey)
		if e := m.idem[mapKey]; e != nil {
			if e.expiry != nil {
				e.expiry.Stop()
			}
			delete(m.idem, mapKey)
			m.deleteIdempotencyLocked(e.rec.Account, e.rec.Key)
		}
		m.dropEmptyAccountLocked(account)
	}
}
