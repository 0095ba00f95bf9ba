package api

import (
	"context"
	"sync"
	"time"
)

// DefaultQueueWait is how long a request over its account's concurrency
// limit waits for a slot before the API answers 429.
const DefaultQueueWait = 2 * time.Second

// admission bounds each account's concurrent requests. A request over the
// limit queues, first come first served, for at most wait; only then is it
// refused. A finished request hands its slot straight to the oldest waiter
// of its account, so no client is starved by others that keep arriving.
type admission struct {
	max      int           // concurrent requests per account
	wait     time.Duration // the longest a request queues
	maxQueue int           // waiters per account past which a request is refused at once

	mu       sync.Mutex
	accounts map[string]*accountQueue
}

type accountQueue struct {
	inFlight int
	waiters  []chan struct{} // oldest first; closed when granted a slot
}

func newAdmission(limit int, wait time.Duration) *admission {
	return &admission{max: limit, wait: wait, maxQueue: 4 * limit, accounts: map[string]*accountQueue{}}
}

// acquire takes a slot for account, waiting in line up to a.wait (or until
// ctx ends). It reports whether the request may proceed; if so, the caller
// must release.
func (a *admission) acquire(ctx context.Context, account string) bool {
	a.mu.Lock()
	q := a.accounts[account]
	if q == nil {
		q = &accountQueue{}
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
	a.mu.Unlock()

	timer := time.NewTimer(a.wait)
	defer timer.Stop()
	select {
	case <-granted:
		return true
	case <-timer.C:
	case <-ctx.Done():
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

// state returns account's requests in flight and waiting (for tests).
func (a *admission) state(account string) (inFlight, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if q := a.accounts[account]; q != nil {
		return q.inFlight, len(q.waiters)
	}
	return 0, 0
}
