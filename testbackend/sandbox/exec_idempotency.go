package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Exec idempotency, an extension of API v1 (openapi.yaml, runCommand):
// commands and run_code take an Idempotency-Key. The first request with a
// key runs the process and its answer is kept under the key; a later
// request with the same key and the same body gets that answer instead of
// running again, and one that comes while the first still runs waits for
// it. A request refused before its process started keeps nothing, so a
// retry with its key runs it.
//
// Keys are per sandbox (and so per account: another account's request for
// the sandbox is NOT_FOUND before any key is looked at), kept in memory
// only: the last MaxExecKeysPerSandbox of each sandbox, for as long as its
// record lives (dropLocked forgets them with it). A backend restart
// forgets every key: a retry after a restart runs the process again.

// MaxExecKeysPerSandbox bounds the Idempotency-Keys kept per sandbox; past
// it the oldest finished one is forgotten.
const MaxExecKeysPerSandbox = 64

// execEntry is one key's run: in flight until done is closed, then its
// answer.
type execEntry struct {
	hash string
	done chan struct{}
	// Set before done is closed. kept is false when the process did not
	// start: the key was released, and a waiter runs the request itself.
	out  ExecOutput
	err  error
	kept bool
}

func (e *execEntry) finished() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// execKeyring is one sandbox's keys, oldest first in order.
type execKeyring struct {
	byKey map[string]*execEntry
	order []string
}

func (k *execKeyring) add(key string, e *execEntry) {
	k.byKey[key] = e
	k.order = append(k.order, key)
	for len(k.order) > MaxExecKeysPerSandbox {
		i := 0
		for i < len(k.order) && !k.byKey[k.order[i]].finished() {
			i++
		}
		if i == len(k.order) {
			return // every key still runs: they are bounded by the account's in-flight limit
		}
		delete(k.byKey, k.order[i])
		k.order = append(k.order[:i], k.order[i+1:]...)
	}
}

func (k *execKeyring) remove(key string, e *execEntry) {
	if k.byKey[key] != e {
		return
	}
	delete(k.byKey, key)
	for i, o := range k.order {
		if o == key {
			k.order = append(k.order[:i], k.order[i+1:]...)
			break
		}
	}
}

// execRequestHash identifies a request's body: the route and its fields,
// with the timeout as applied (an omitted timeoutMs and the default are
// the same request).
func execRequestHash(route, a, b string, timeout time.Duration) string {
	raw, _ := json.Marshal([]any{route, a, b, timeout.Milliseconds()})
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// execOnce runs prep's process in the sandbox, at most once per key (see
// above). Without a key it runs it under the request's context. With one,
// the process runs in the background under the manager's context, so that
// it ends as it would have and its answer is kept even if the request that
// started it is gone; each request waits for it as long as its own
// context allows.
func (m *Manager) execOnce(ctx context.Context, account, id, key, hash string, prep execPrep) (ExecOutput, bool, error) {
	if key == "" {
		out, _, err := m.execNow(ctx, account, id, prep)
		return out, false, err
	}
	for {
		m.mu.Lock()
		sb := m.boxes[id]
		if sb == nil || sb.Account != account {
			m.mu.Unlock()
			return ExecOutput{}, false, notFound(id)
		}
		ring := m.execKeys[id]
		if ring == nil {
			ring = &execKeyring{byKey: map[string]*execEntry{}}
			m.execKeys[id] = ring
		}
		if e := ring.byKey[key]; e != nil {
			m.mu.Unlock()
			if e.hash != hash {
				return ExecOutput{}, false, errorf(CodeIdempotencyKeyReused, "Idempotency-Key %q was used with a different request in sandbox %s; use a new key for a different request", key, id)
			}
			select {
			case <-e.done:
			case <-ctx.Done():
				return ExecOutput{}, false, &Error{Code: CodeIdempotencyInProgress, Message: "a request with this Idempotency-Key is still running; retry shortly for its answer", RetryAfter: 1}
			}
			if !e.kept {
				continue // it did not start: this request may run it
			}
			return e.out, true, e.err
		}
		e := &execEntry{hash: hash, done: make(chan struct{})}
		ring.add(key, e)
		started := m.goLocked(func() {
			out, ran, err := m.execNow(m.ctx, account, id, prep)
			m.mu.Lock()
			defer m.mu.Unlock()
			e.out, e.err, e.kept = out, err, ran
			if !ran {
				if r := m.execKeys[id]; r != nil {
					r.remove(key, e)
				}
			}
			close(e.done)
		})
		if !started {
			ring.remove(key, e)
			m.mu.Unlock()
			return ExecOutput{}, false, errorf(CodeServiceUnavailable, "the sandbox service is shutting down; retry later")
		}
		m.mu.Unlock()
		select {
		case <-e.done:
			return e.out, false, e.err
		case <-ctx.Done():
			return ExecOutput{}, false, outcomeUnknown("the request ended before the process in sandbox %s finished (it goes on: a retry with the same Idempotency-Key gets its answer)", id)
		}
	}
}
