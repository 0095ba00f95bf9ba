package sandbox

import (
	"container/heap"
	"time"
)

// ageSet is a set of keys that yields its oldest first and adds up their
// sizes, for the per-account caps (caps.go, exec_caps.go): adding,
// removing and finding the oldest cost O(log n) in the account's own
// members, and the total is kept as members come and go.
//
// A member's size is given as it is added (addSized), or, where the
// adder does not have it at hand (index.go adds an ended sandbox as it
// reindexes it, the start adds keys from disk), taken by weigh, which
// whoever reads bytes calls first; until then the member counts 0.
type ageSet struct {
	items map[string]*ageItem
	h     ageHeap
	bytes int64 // the sizes of the weighed members
	// unweighed holds the members added without a size since the last
	// weigh (and any of them removed since: weigh skips those).
	unweighed []*ageItem
}

// ageItem is one member of an ageSet.
type ageItem struct {
	key     string
	at      time.Time
	seq     uint64 // ties on at go by arrival
	index   int    // in the heap
	size    int64
	weighed bool
}

func (s *ageSet) len() int { return len(s.h) }

func (s *ageSet) has(key string) bool { return s.items[key] != nil }

// add puts key in the set, to be weighed later; one already in it keeps
// its place and size.
func (s *ageSet) add(key string, at time.Time, seq uint64) {
	if it := s.insert(key, at, seq); it != nil {
		s.unweighed = append(s.unweighed, it)
	}
}

// addSized puts key in the set with its size; one already in it keeps
// its place and size.
func (s *ageSet) addSized(key string, at time.Time, seq uint64, size int64) {
	if it := s.insert(key, at, seq); it != nil {
		it.size, it.weighed = size, true
		s.bytes += size
	}
}

// insert adds a new member and returns it, or nil when key is in already.
func (s *ageSet) insert(key string, at time.Time, seq uint64) *ageItem {
	if s.items == nil {
		s.items = map[string]*ageItem{}
	}
	if s.items[key] != nil {
		return nil
	}
	it := &ageItem{key: key, at: at, seq: seq}
	s.items[key] = it
	heap.Push(&s.h, it)
	return it
}

// weigh sizes the members added by add since it last ran.
func (s *ageSet) weigh(size func(key string) int64) {
	for _, it := range s.unweighed {
		if s.items[it.key] == it && !it.weighed {
			it.size, it.weighed = size(it.key), true
			s.bytes += it.size
		}
	}
	s.unweighed = nil
}

func (s *ageSet) remove(key string) {
	it := s.items[key]
	if it == nil {
		return
	}
	heap.Remove(&s.h, it.index)
	delete(s.items, key)
	if it.weighed {
		s.bytes -= it.size
	}
}

// oldest is the oldest key; the set must not be empty.
func (s *ageSet) oldest() string { return s.h[0].key }

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

var _ heap.Interface = (*ageHeap)(nil)
