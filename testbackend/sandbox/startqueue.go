package sandbox

import (
	"context"
	"slices"
	"sync"
)

// Container starts take turns across accounts. At most Config.StartSlots
// run at once; a start that finds them all busy waits in its account's
// line, and a freed slot goes to the next account in round-robin order,
// not to the oldest waiter: one account's burst of creates does not queue
// another account's single create behind it, which waits at most for
// one start of each account ahead of it.

// DefaultStartSlots is how many container starts run at once by default:
// enough that a stuck start does not hold up the others, few enough that a
// burst is interleaved rather than started all together.
const DefaultStartSlots = 8

type startQueue struct {
	slots int

	mu      sync.Mutex
	running int
	order   []string                   // accounts with waiters, the next first
	waiting map[string][]chan struct{} // by account, oldest first
}

func newStartQueue(slots int) *startQueue {
	return &startQueue{slots: slots, waiting: map[string][]chan struct{}{}}
}

// acquire waits for a start slot for account; release gives it back. An
// error means ctx ended first (and no slot is held).
func (q *startQueue) acquire(ctx context.Context, account string) (release func(), err error) {
	q.mu.Lock()
	if q.running < q.slots && len(q.order) == 0 {
		q.running++
		q.mu.Unlock()
		return q.release, nil
	}
	ch := make(chan struct{})
	if len(q.waiting[account]) == 0 {
		q.order = append(q.order, account)
	}
	q.waiting[account] = append(q.waiting[account], ch)
	q.mu.Unlock()

	select {
	case <-ch:
		return q.release, nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		select {
		case <-ch: // granted meanwhile: give it back
			q.releaseLocked()
		default:
			q.dropLocked(account, ch)
		}
		return nil, ctx.Err()
	}
}

func (q *startQueue) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.releaseLocked()
}

// releaseLocked frees a slot and hands it to the first waiter of the next
// account in line; that account goes to the back of the line if it has
// more.
func (q *startQueue) releaseLocked() {
	q.running--
	for q.running < q.slots && len(q.order) > 0 {
		account := q.order[0]
		q.order = q.order[1:]
		line := q.waiting[account]
		ch := line[0]
		if len(line) > 1 {
			q.waiting[account] = line[1:]
			q.order = append(q.order, account)
		} else {
			delete(q.waiting, account)
		}
		q.running++
		close(ch)
	}
}

func (q *startQueue) dropLocked(account string, ch chan struct{}) {
	line := slices.DeleteFunc(q.waiting[account], func(c chan struct{}) bool { return c == ch })
	if len(line) > 0 {
		q.waiting[account] = line
		return
	}
	delete(q.waiting, account)
	q.order = slices.DeleteFunc(q.order, func(a string) bool { return a == account })
}
