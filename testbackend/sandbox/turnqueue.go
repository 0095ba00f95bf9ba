package sandbox

import (
	"context"
	"runtime"
	"slices"
	"sync"
)

// A turnQueue hands out the slots of some host work in turns across
// accounts. At most slots run at once; a caller that finds them all busy
// waits in its account's line, and a freed slot goes to the next account
// in round-robin order, not to the oldest waiter: one account's burst does
// not queue another account's single call behind it, which waits at most
// for one turn of each account ahead of it. While contended says more
// than one account is on the host, one account holds at most share slots,
// even with slots free: its burst then takes at most that much of the
// host from the others. An account alone uses every slot.
//
// Container starts take turns (Config.StartSlots, Config.StartShare): a
// start costs host CPU outside any sandbox's limits (the engine, the
// runtime's boot, the network wiring), and the soak's hostile-neighbour
// row measures what a burst of them does to another account's commands.

// DefaultStartSlots is how many container starts run at once by default:
// enough that a stuck start does not hold up the others, few enough that a
// burst is interleaved rather than started all together.
const DefaultStartSlots = 8

// DefaultStartShare is how many starts one account runs at once while
// other accounts have live sandboxes: half the host's cores, at least one.
func DefaultStartShare() int { return max(1, runtime.NumCPU()/2) }

type turnQueue struct {
	slots int
	share int
	// contended reports whether more than one account has live sandboxes
	// (index.go keeps the count). It is called under mu, so it must not
	// take a lock that is held while calling into the queue.
	contended func() bool

	mu        sync.Mutex
	running   int
	byAccount map[string]int             // running calls by account
	order     []string                   // accounts with waiters, the next first
	waiting   map[string][]chan struct{} // by account, oldest first
}

func newTurnQueue(slots, share int, contended func() bool) *turnQueue {
	if share <= 0 || share > slots {
		share = slots
	}
	if contended == nil {
		contended = func() bool { return false }
	}
	return &turnQueue{slots: slots, share: share, contended: contended,
		byAccount: map[string]int{}, waiting: map[string][]chan struct{}{}}
}

// acquire waits for a slot for account; the release it returns
// gives it back. An error means ctx ended first (and no slot is held).
func (q *turnQueue) acquire(ctx context.Context, account string) (release func(), err error) {
	release = func() { q.release(account) }
	q.mu.Lock()
	ch := make(chan struct{})
	if len(q.waiting[account]) == 0 {
		q.order = append(q.order, account)
	}
	q.waiting[account] = append(q.waiting[account], ch)
	q.dispatchLocked()
	q.mu.Unlock()

	select {
	case <-ch:
		return release, nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		select {
		case <-ch: // granted meanwhile: give it back
			q.releaseLocked(account)
		default:
			q.dropLocked(account, ch)
		}
		return nil, ctx.Err()
	}
}

func (q *turnQueue) release(account string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.releaseLocked(account)
}

func (q *turnQueue) releaseLocked(account string) {
	q.running--
	if q.byAccount[account]--; q.byAccount[account] <= 0 {
		delete(q.byAccount, account)
	}
	q.dispatchLocked()
}

// dispatchLocked hands free slots to the first waiter of each account in
// line that may start one more; an account served goes to the back of
// the line if it has more waiting. An account at its share keeps its
// place: one of its own starts ends before long, and dispatches again.
func (q *turnQueue) dispatchLocked() {
	for q.running < q.slots && len(q.order) > 0 {
		limit := q.slots
		if q.share < q.slots && q.contended() {
			limit = q.share
		}
		i := slices.IndexFunc(q.order, func(a string) bool { return q.byAccount[a] < limit })
		if i < 0 {
			return
		}
		account := q.order[i]
		q.order = slices.Delete(q.order, i, i+1)
		line := q.waiting[account]
		ch := line[0]
		if len(line) > 1 {
			q.waiting[account] = line[1:]
			q.order = append(q.order, account)
		} else {
			delete(q.waiting, account)
		}
		q.running++
		q.byAccount[account]++
		close(ch)
	}
}

func (q *turnQueue) dropLocked(account string, ch chan struct{}) {
	line := slices.DeleteFunc(q.waiting[account], func(c chan struct{}) bool { return c == ch })
	if len(line) > 0 {
		q.waiting[account] = line
		return
	}
	delete(q.waiting, account)
	q.order = slices.DeleteFunc(q.order, func(a string) bool { return a == account })
}
