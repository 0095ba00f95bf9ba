package sandbox

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"time"
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
//
// A share bounds how many run at once, not how often: an account that
// creates again as soon as a start ends keeps its share of slots busy
// back to back, a core's worth of host work on a small host that no
// sandbox's CPU cap counts. So while contended, a call that held its slot
// for d keeps its account's place in the share for rest times d more
// after it ends (the slot itself is free for other accounts at once):
// one account's calls then hold its share at most 1/(1+rest) of the
// time (Config.StartDuty), a rest being at most maxRest. An account
// alone never rests.

// DefaultStartSlots is how many container starts run at once by default:
// enough that a stuck start does not hold up the others, few enough that a
// burst is interleaved rather than started all together.
const DefaultStartSlots = 8

// DefaultStartShare is how many starts one account runs at once while
// other accounts have live sandboxes: half the host's cores, at least one.
func DefaultStartShare() int { return max(1, runtime.NumCPU()/2) }

// DefaultStartDuty is the part of the time one account's starts may hold
// its share of start slots while other accounts have live sandboxes: a
// start that took d is followed by 3d in which the account starts
// nothing more.
const DefaultStartDuty = 0.25

// maxRest bounds one rest: a start that hung for minutes (an engine that
// stopped answering) does not keep its account from starting for three
// times as long.
const maxRest = 30 * time.Second

// restFor is the rest after a call, in multiples of its time, that
// keeps calls to duty of the time (0 < duty <= 1; 1: no rest).
func restFor(duty float64) float64 {
	if duty <= 0 || duty >= 1 {
		return 0
	}
	return (1 - duty) / duty
}

type turnQueue struct {
	slots int
	share int
	// contended reports whether more than one account has live sandboxes
	// (index.go keeps the count). It is called under mu, so it must not
	// take a lock that is held while calling into the queue.
	contended func() bool
	// rest is how long, in multiples of the time a call held its slot, its
	// account's place in the share stays taken after it ends while
	// contended (0: none); now and after are the clock (tests set them).
	rest  float64
	now   func() time.Time
	after func(time.Duration, func())
	// onHold, when set, is told each time an account's count of running
	// and resting calls changes (held); it is called under mu, so it must
	// not take a lock that is held while calling into the queue.
	onHold func(account string)

	mu        sync.Mutex
	running   int
	byAccount map[string]int             // running and resting calls by account
	order     []string                   // accounts with waiters, the next first
	waiting   map[string][]chan struct{} // by account, oldest first
}

func newTurnQueue(slots, share int, rest float64, contended func() bool) *turnQueue {
	if share <= 0 || share > slots {
		share = slots
	}
	if contended == nil {
		contended = func() bool { return false }
	}
	return &turnQueue{slots: slots, share: share, contended: contended, rest: max(rest, 0),
		now: time.Now, after: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		byAccount: map[string]int{}, waiting: map[string][]chan struct{}{}}
}

// acquire waits for a slot for account; the release it returns
// gives it back. An error means ctx ended first (and no slot is held).
func (q *turnQueue) acquire(ctx context.Context, account string) (release func(), err error) {
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
		return q.releaser(account), nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		select {
		case <-ch: // granted meanwhile: give it back
			q.releaseLocked(account, 0)
		default:
			q.dropLocked(account, ch)
		}
		return nil, ctx.Err()
	}
}

// tryAcquire takes a slot for account only if acquire would grant one at
// once: a slot free after the waiters it is owed to (the share may have
// grown since they queued), the account under its share, and none of its
// calls waiting. ok false means nothing is held.
func (q *turnQueue) tryAcquire(account string) (release func(), ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.dispatchLocked()
	if q.running >= q.slots || q.byAccount[account] >= q.limitLocked() || len(q.waiting[account]) > 0 {
		return nil, false
	}
	q.grantLocked(account)
	return q.releaser(account), true
}

// grantLocked counts a slot granted to account.
func (q *turnQueue) grantLocked(account string) {
	q.running++
	q.byAccount[account]++
	q.heldChangedLocked(account)
}

// held is how many places in the share account holds now: its calls
// running and resting.
func (q *turnQueue) held(account string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byAccount[account]
}

func (q *turnQueue) heldChangedLocked(account string) {
	if q.onHold != nil {
		q.onHold(account)
	}
}

// releaser is the release of a slot granted to account now: it gives the
// slot back with the time it was held.
func (q *turnQueue) releaser(account string) func() {
	granted := q.now()
	return func() { q.release(account, q.now().Sub(granted)) }
}

func (q *turnQueue) release(account string, held time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.releaseLocked(account, held)
}

// releaseLocked frees the slot of a call that held it for held; its
// account's place in the share rests first while contended.
func (q *turnQueue) releaseLocked(account string, held time.Duration) {
	q.running--
	if rest := min(time.Duration(q.rest*float64(held)), maxRest); rest > 0 && q.contended() {
		q.after(rest, func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.leaveLocked(account)
			q.dispatchLocked()
		})
	} else {
		q.leaveLocked(account)
	}
	q.dispatchLocked()
}

// leaveLocked gives account's place in the share back.
func (q *turnQueue) leaveLocked(account string) {
	if q.byAccount[account]--; q.byAccount[account] <= 0 {
		delete(q.byAccount, account)
	}
	q.heldChangedLocked(account)
}

// dispatchLocked hands free slots to the first waiter of each account in
// line that may start one more; an account served goes to the back of
// the line if it has more waiting. An account at its share keeps its
// place: one of its own starts ends before long, and dispatches again.
func (q *turnQueue) dispatchLocked() {
	for q.running < q.slots && len(q.order) > 0 {
		limit := q.limitLocked()
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
		q.grantLocked(account)
		close(ch)
	}
}

// limitLocked is how many slots one account may hold now: its share
// while contended, every slot otherwise.
func (q *turnQueue) limitLocked() int {
	if q.share < q.slots && q.contended() {
		return q.share
	}
	return q.slots
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
