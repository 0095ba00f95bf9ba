package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
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
// the sandbox is NOT_FOUND before any key is looked at): the last
// MaxExecKeysPerSandbox of each sandbox, for as long as its record lives
// (dropLocked forgets them with it). Each is on disk before its process
// starts (store.ExecKey), and again with its answer once the process
// ended, so no restart lets a retry run a process twice: after a restart
// a key whose process was running, or whose answer was larger than
// MaxKeptExecAnswer, answers 502 COMMAND_OUTCOME_UNKNOWN; one whose
// answer was kept replays it. What the keys of one account may hold,
// running and finished, is bounded in exec_caps.go.

// MaxExecKeysPerSandbox bounds the Idempotency-Keys kept per sandbox; past
// it the oldest finished one is forgotten. It bounds the running ones too:
// a new key is refused while that many run (exec_caps.go).
const MaxExecKeysPerSandbox = 64

// MaxKeptExecAnswer bounds the answer (stdout and stderr together) that a
// key keeps on disk; a larger one is kept in memory only.
const MaxKeptExecAnswer = 64 << 10

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
	account string // the sandbox's
	byKey   map[string]*execEntry
	order   []string
}

// add keeps e under key and returns the keys it forgot to make room.
func (k *execKeyring) add(key string, e *execEntry) (forgotten []string) {
	k.byKey[key] = e
	k.order = append(k.order, key)
	for len(k.order) > MaxExecKeysPerSandbox {
		i := 0
		for i < len(k.order) && !k.byKey[k.order[i]].finished() {
			i++
		}
		if i == len(k.order) {
			// Every key still runs. Not reached: execOnce admits no new key
			// while MaxExecKeysPerSandbox run (exec_caps.go), and the keys
			// taken back at start have all finished.
			return forgotten
		}
		forgotten = append(forgotten, k.order[i])
		delete(k.byKey, k.order[i])
		k.order = append(k.order[:i], k.order[i+1:]...)
	}
	return forgotten
}

// remove forgets key if it still holds e, and says whether it did.
func (k *execKeyring) remove(key string, e *execEntry) bool {
	if k.byKey[key] != e {
		return false
	}
	delete(k.byKey, key)
	for i, o := range k.order {
		if o == key {
			k.order = append(k.order[:i], k.order[i+1:]...)
			break
		}
	}
	return true
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
		out, _, err := m.execNow(ctx, account, id, prep, nil)
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
			ring = &execKeyring{account: account, byKey: map[string]*execEntry{}}
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
		if err := m.admitExecLocked(account, id, ring); err != nil {
			m.mu.Unlock()
			return ExecOutput{}, false, err
		}
		e := &execEntry{hash: hash, done: make(chan struct{})}
		for _, old := range ring.add(key, e) {
			m.dropExecKeyLocked(account, id, old)
		}
		rec := &store.ExecKey{SandboxID: id, Key: key, RequestHash: hash, CreatedAt: time.Now().UTC()}
		started := m.goLocked(func() {
			out, ran, err := m.execNow(m.ctx, account, id, prep, func() error { return m.recordExecStart(rec) })
			if ran {
				failpoint.Hit(failpoint.ExecRan)
				m.recordExecEnd(rec, e, out, err)
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			e.out, e.err, e.kept = out, err, ran
			if !ran {
				if r := m.execKeys[id]; r != nil && r.remove(key, e) {
					m.deleteExecKeyLocked(id, key)
				}
			}
			m.execEndedLocked(account, id, key, e)
			close(e.done)
		})
		if !started {
			ring.remove(key, e)
			m.execEndedLocked(account, id, key, e)
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

// recordExecStart puts a key's record on disk before its process starts;
// a key that cannot be recorded does not run (503: not started).
func (m *Manager) recordExecStart(rec *store.ExecKey) error {
	m.mu.Lock()
	w := m.putExecKeyLocked(rec)
	m.mu.Unlock()
	if err := w.wait(); err != nil {
		m.log.Warn("exec key not saved; the process is not started", "sandbox", rec.SandboxID, "err", err)
		return errorf(CodeServiceUnavailable, "the backend could not record the request's Idempotency-Key in sandbox %s, so the process was not started; retry shortly", rec.SandboxID)
	}
	failpoint.Hit(failpoint.ExecRecorded)
	return nil
}

// recordExecEnd puts the answer of a key's process on disk (unless it is
// larger than MaxKeptExecAnswer, or not an API answer) before the request
// answers, if the key is still kept. A failed write is logged: after a
// restart the key answers COMMAND_OUTCOME_UNKNOWN, never runs again.
func (m *Manager) recordExecEnd(rec *store.ExecKey, e *execEntry, out ExecOutput, runErr error) {
	done := *rec
	done.Done = true
	var apiErr *Error
	switch {
	case runErr == nil && len(out.Stdout)+len(out.Stderr) <= MaxKeptExecAnswer:
		done.Output, _ = encodeKept(out)
	case runErr != nil && errors.As(runErr, &apiErr):
		done.Error, _ = encodeKept(apiErr)
	}
	m.mu.Lock()
	if r := m.execKeys[rec.SandboxID]; r == nil || r.byKey[rec.Key] != e {
		m.mu.Unlock() // forgotten meanwhile (its sandbox deleted): nothing to keep
		return
	}
	w := m.putExecKeyLocked(&done)
	m.mu.Unlock()
	if err := w.wait(); err != nil {
		m.log.Warn("exec key's answer not saved; after a restart a retry answers COMMAND_OUTCOME_UNKNOWN", "sandbox", rec.SandboxID, "err", err)
	}
}

// loadExecKeysLocked takes back the keys on disk at start: those of a
// sandbox with a record answer a retry as they would have (a process that
// was running when the backend went answers COMMAND_OUTCOME_UNKNOWN, never
// runs again); the others go.
func (m *Manager) loadExecKeysLocked(recs []*store.ExecKey) {
	slices.SortFunc(recs, func(a, b *store.ExecKey) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for _, rec := range recs {
		if m.boxes[rec.SandboxID] == nil {
			m.deleteExecKeyLocked(rec.SandboxID, rec.Key)
			continue
		}
		e := &execEntry{hash: rec.RequestHash, done: make(chan struct{}), kept: true}
		close(e.done)
		var apiErr Error
		switch {
		case !rec.Done:
			e.err = outcomeUnknown("the backend restarted while the process of this Idempotency-Key ran in sandbox %s; it is not run again", rec.SandboxID)
		case len(rec.Output) > 0 && json.Unmarshal(rec.Output, &e.out) == nil:
		case len(rec.Error) > 0 && json.Unmarshal(rec.Error, &apiErr) == nil && apiErr.Code != "":
			e.err = &apiErr
		default:
			e.err = outcomeUnknown("the process of this Idempotency-Key ended in sandbox %s before the backend restarted, and its answer was too large to keep across the restart; it is not run again", rec.SandboxID)
		}
		account := m.boxes[rec.SandboxID].Account
		ring := m.execKeys[rec.SandboxID]
		if ring == nil {
			ring = &execKeyring{account: account, byKey: map[string]*execEntry{}}
			m.execKeys[rec.SandboxID] = ring
		}
		m.keepLoadedExecAnswerLocked(account, rec.SandboxID, rec.Key, e, rec.CreatedAt)
		for _, old := range ring.add(rec.Key, e) {
			m.dropExecKeyLocked(account, rec.SandboxID, old)
		}
	}
	for account := range m.execUse {
		m.trimExecAnswersLocked(account) // the budget may be lower than when they were kept
	}
}

// forgetExecKeysLocked forgets a sandbox's keys, in memory and on disk.
func (m *Manager) forgetExecKeysLocked(id string) {
	if ring := m.execKeys[id]; ring != nil {
		for _, key := range ring.order {
			m.dropExecKeyLocked(ring.account, id, key)
		}
	}
	delete(m.execKeys, id)
}

// putExecKeyLocked snapshots the key's record and hands it to the writer.
func (m *Manager) putExecKeyLocked(rec *store.ExecKey) *recordWrite {
	snap := *rec
	return m.disk.enqueue(execKeyRecord(rec.SandboxID, rec.Key), "put", func() error { return m.st.PutExecKey(&snap) })
}

// deleteExecKeyLocked hands the removal of the key's record to the writer.
func (m *Manager) deleteExecKeyLocked(id, key string) {
	m.disk.enqueue(execKeyRecord(id, key), "delete", func() error { return m.st.DeleteExecKey(id, key) })
}

func execKeyRecord(id, key string) string { return "execkey/" + id + "\x00" + key }
