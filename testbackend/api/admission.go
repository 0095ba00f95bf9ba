package api

import (
	"context"
	"sync"
	"time"
)

// DefaultQueueWait is how long a request over its account's concurrency
// limit waits in line without the line moving (no request of the account
// finishing) before the API answers 429.
const DefaultQueueWait = 2 * time.Second

// DefaultQueueWaitMax is the longest a request waits in line in all, however
// steadily the line moves.
const DefaultQueueWaitMax = 30 * time.Second

// admission bounds each account's concurrent requests. A request over the
// limit queues, first come first served. It waits as long as the line
// moves: it is refused only when no slot of its account was handed on for
// wait (the account's requests are stuck, or take longer than a client
// should be kept waiting), or after maxWait in all. A busy account whose
// requests keep finishing therefore queues instead of being refused, and
// a stuck one is told so within wait. A finished request hands its slot
// straight to the oldest waiter of its account, so no client is starved
// by others that keep arriving.
type admission struct {
	max      int           // concurrent requests per account
	wait     time.Duration // the longest a request queues while the line does not move
	maxWait  time.Duration // the longest a request queues in all
	maxQueue int           // waiters per account past which a request is refused at once
	maxPolls int           // long polls per account at once (they hold no slot while they wait)

	mu       sync.Mutex
	accounts map[string]*accountQueue
	polls    map[string]int
}

type accountQueue struct {
	inFlight int
	waiters  []chan struct{} // oldest first; closed when granted a slot
	// moved is closed (and replaced) each time a slot is handed on to a
	// waiter: the line moved, and every waiter's patience starts again.
	moved chan struct{}
}

func newAdmission(limit int, wait, maxWait time.Duration) *admission {
	return &admission{max: limit, wait: wait, maxWait: max(maxWait, wait), maxQueue: 4 * limit, maxPolls: 4 * limit, accounts: map[string]*accountQueue{}, polls: map[string]int{}}
}

// acquire takes a slot for account, waiting in line while it moves (see
// admission) or until ctx ends. It reports whether the request may
// proceed; if so, the caller must release.
func (a *admission) acquire(ctx context.Context, account string) bool {
	a.mu.Lock()
	q := a.accounts[account]
	if q == nil {
		q = &accountQueue{moved: make(chan struct{})}
		a.accounts[account] = q
	}
	if q.inFlight < a.max && len(q.waiters) == 0 {
		q.inFlight++
		a.mu.Unlock()
		return true
	}
	if a.wait <= 0 || len(q.waiters) >= a.maxQueue {
		a.mu.Unlock()
		return false
	}
	granted := make(chan struct{})
	q.waiters = append(q.waiters, granted)
	moved := q.moved
	a.mu.Unlock()

	if a.await(ctx, account, granted, moved) {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-granted: // granted while the timer fired: the slot is ours
		return true
	default:
	}
	for i, w := range q.waiters {
		if w == granted {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			break
		}
	}
	a.forget(account, q)
	return false
}

// await waits until granted is closed (true), or until the line has not
// moved for a.wait, a.maxWait has passed or ctx ended (false).
func (a *admission) await(ctx context.Context, account string, granted, moved chan struct{}) bool {
	total := time.NewTimer(a.maxWait)
	defer total.Stop()
	stall := time.NewTimer(a.wait)
	defer stall.Stop()
	for {
		select {
		case <-granted:
			return true
		case <-moved:
			a.mu.Lock()
			if q := a.accounts[account]; q != nil {
				moved = q.moved
			}
			a.mu.Unlock()
			stall.Reset(a.wait)
		case <-stall.C:
			return false
		case <-total.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// release gives the slot to the oldest waiter of account, or frees it.
func (a *admission) release(account string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.accounts[account]
	if q == nil {
		return
	}
	if len(q.waiters) > 0 {
		close(q.waiters[0])
		q.waiters = q.waiters[1:]
		close(q.moved)
		q.moved = make(chan struct{})
		return
	}
	q.inFlight--
	a.forget(account, q)
}

// forget drops an account with nothing in flight and nobody waiting.
func (a *admission) forget(account string, q *accountQueue) {
	if q.inFlight <= 0 && len(q.waiters) == 0 {
		delete(a.accounts, account)
	}
}

// startPoll counts a long poll of account that waits without a slot; it
// reports false, counting nothing, when maxPolls already wait.
func (a *admission) startPoll(account string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.polls[account] >= a.maxPolls {
		return false
	}
	a.polls[account]++
	return true
}

// endPoll uncounts a long poll that startPoll counted.
func (a *admission) endPoll(account string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.polls[account]--; a.polls[account] <= 0 {
		delete(a.polls, account)
	}
}

// state returns account's requests in flight and waiting (for tests).
func (a *admission) state(account string) (inFlight, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if q := a.accounts[account]; q != nil {
		return q.inFlight, len(q.waiters)
	}
	return 0, 0
}
