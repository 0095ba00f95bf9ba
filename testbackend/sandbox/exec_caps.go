package sandbox

import (
	"fmt"
	"strings"
	"time"
)

// Bounds on what an account's commands with an Idempotency-Key hold
// (exec_idempotency.go). Their processes run on after the requests that
// started them are gone, and those requests gave their admission slots
// back, so the account's requests in flight bound nothing here. Instead:
//
//   - Running: at most MaxExecKeysPerSandbox of them run at once in one
//     sandbox, and MaxRunningExecKeysPerAccount across the account's
//     sandboxes. A request with a new key past either is refused at once
//     with 429 TOO_MANY_REQUESTS and Retry-After, and runs nothing (it
//     keeps nothing either, so a retry with its key runs it once there is
//     room); a request with the key of one that runs still waits for its
//     answer. Each running one holds a goroutine, an engine exec or an
//     agent request, and up to MaxExecOutput of stdout and of stderr.
//   - Kept answers: a finished key keeps its whole answer in memory (up
//     to MaxExecOutput of each stream) for as long as its sandbox's record
//     lives, at most MaxExecKeysPerSandbox keys per sandbox, and across
//     the account's sandboxes, live and ended, at most
//     MaxExecAnswerBytesPerAccount (execAnswerBytes). Past it the
//     account's oldest finished keys, by when they finished, are
//     forgotten first, in memory and on disk, as the count forgets them
//     per sandbox: a retry with a forgotten key runs its command again.

// Defaults of the bounds. 64 running commands is one sandbox's worth
// (MaxExecKeysPerSandbox) for the whole account. 16 MiB of answers keeps
// the last 8 answers of the largest size (1 MiB of stdout and of stderr),
// and thousands of ordinary ones: the answer is for the retry that comes
// soon after a dropped connection.
const (
	DefaultMaxRunningExecKeysPerAccount = 64
	DefaultMaxExecAnswerBytesPerAccount = 16 << 20
)

// execRetryAfter is the Retry-After, in seconds, of a new key refused for
// too many running ones: a command runs for up to MaxExecTimeoutMs, so an
// immediate retry would only be refused again.
const execRetryAfter = 5

// execAccount is what one account's keyed commands hold.
type execAccount struct {
	running int    // processes started and not yet ended
	answers ageSet // finished keys kept, by execAnswerName, oldest finished first
}

func execAnswerName(id, key string) string { return id + "\x00" + key }

// execAnswerBytes is what a finished key keeps in memory, for
// MaxExecAnswerBytesPerAccount: its answer, and its name and hash.
func execAnswerBytes(key string, e *execEntry) int64 {
	n := len(key) + len(e.hash) + len(e.out.Stdout) + len(e.out.Stderr)
	if e.err != nil {
		n += len(e.err.Error())
	}
	return int64(n)
}

// running is how many of the sandbox's keys have a process that has not
// ended.
func (k *execKeyring) running() int {
	n := 0
	for _, e := range k.byKey {
		if !e.finished() {
			n++
		}
	}
	return n
}

func (m *Manager) execAccountLocked(account string) *execAccount {
	if m.execUse == nil {
		m.execUse = map[string]*execAccount{}
	}
	u := m.execUse[account]
	if u == nil {
		u = &execAccount{}
		m.execUse[account] = u
	}
	return u
}

func (m *Manager) dropEmptyExecAccountLocked(account string) {
	if u := m.execUse[account]; u != nil && u.running == 0 && u.answers.len() == 0 {
		delete(m.execUse, account)
	}
}

// admitExecLocked counts a new key's command as running in sandbox id
// (ring its keys), or refuses it, running nothing, when the sandbox or
// the account has as many running as it may.
func (m *Manager) admitExecLocked(account, id string, ring *execKeyring) error {
	if n := ring.running(); n >= MaxExecKeysPerSandbox {
		return &Error{Code: CodeTooManyRequests, RetryAfter: execRetryAfter, Message: fmt.Sprintf(
			"too many commands with an Idempotency-Key still run in sandbox %s (%d; at most %d at once), so this one was not run; wait for one to finish, or send one of their keys again for its answer", id, n, MaxExecKeysPerSandbox)}
	}
	u := m.execAccountLocked(account)
	if u.running >= m.cfg.MaxRunningExecKeysPerAccount {
		return &Error{Code: CodeTooManyRequests, RetryAfter: execRetryAfter, Message: fmt.Sprintf(
			"too many commands with an Idempotency-Key still run in this account's sandboxes (%d; at most %d at once), so this one in sandbox %s was not run; wait for one to finish, or send one of their keys again for its answer", u.running, m.cfg.MaxRunningExecKeysPerAccount, id)}
	}
	u.running++
	return nil
}

// execEndedLocked counts the end of the process of key e, admitted by
// admitExecLocked, or of its start that never came; a kept answer whose
// key is still held counts against the account's answers.
func (m *Manager) execEndedLocked(account, id, key string, e *execEntry) {
	u := m.execAccountLocked(account)
	u.running--
	if r := m.execKeys[id]; e.kept && r != nil && r.byKey[key] == e {
		u.answers.addSized(execAnswerName(id, key), time.Now(), m.nextSeqLocked(), execAnswerBytes(key, e))
		m.trimExecAnswersLocked(account)
	}
	m.dropEmptyExecAccountLocked(account)
}

// keepLoadedExecAnswerLocked counts a finished key taken back from disk at
// start; the caller trims the account's answers once all are in.
func (m *Manager) keepLoadedExecAnswerLocked(account, id, key string, e *execEntry, at time.Time) {
	m.execAccountLocked(account).answers.addSized(execAnswerName(id, key), at, m.nextSeqLocked(), execAnswerBytes(key, e))
}

// dropExecKeyLocked forgets a key taken out of its sandbox's keys, on
// disk and in its account's answers.
func (m *Manager) dropExecKeyLocked(account, id, key string) {
	m.deleteExecKeyLocked(id, key)
	if u := m.execUse[account]; u != nil {
		u.answers.remove(execAnswerName(id, key))
		m.dropEmptyExecAccountLocked(account)
	}
}

// trimExecAnswersLocked forgets the account's oldest finished keys while
// their answers hold more than MaxExecAnswerBytesPerAccount.
func (m *Manager) trimExecAnswersLocked(account string) {
	for {
		u := m.execUse[account]
		if u == nil || u.answers.bytes <= m.cfg.MaxExecAnswerBytesPerAccount {
			return
		}
		name := u.answers.oldest()
		id, key, _ := strings.Cut(name, "\x00") // sandbox ids have no NUL
		if r := m.execKeys[id]; r != nil && r.byKey[key] != nil {
			r.remove(key, r.byKey[key])
		}
		m.log.Info("forgetting the answer of a command's Idempotency-Key: its account's kept answers are past their budget",
			"sandbox", id, "account", account, "bytes", u.answers.bytes, "budget", m.cfg.MaxExecAnswerBytesPerAccount)
		m.dropExecKeyLocked(account, id, key)
	}
}
