package sandbox

import (
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Per-account caps on what is kept after the work is done, so that one
// account cannot fill the backend's memory and disk with records. Each
// is a count and a byte budget; past either, the oldest go first:
//
//   - MaxRetainedPerAccount ended (exited or terminated) sandboxes, and
//     MaxRetainedBytesPerAccount of their records (recordBytes). Past
//     them, the account's oldest ended sandboxes, by EndedAt, are
//     forgotten before their retention ends: record and log file
//     deleted, the id answers 404 as after a DELETE. Live sandboxes never
//     count.
//   - MaxIdempotencyKeysPerAccount idempotency keys whose create has
//     answered, and MaxIdempotencyBytesPerAccount of what they keep
//     (keyBytes: mostly the stored answer). Past them the oldest keys, by
//     when their first request came, are forgotten before their TTL: a
//     create that sends one again makes a new sandbox. Keys in flight are
//     bounded by the account's requests in flight instead.
//
// Both are applied as records come (an end, a settled key) and at start.
// The count alone bounds nothing in bytes: a create body may carry 64 KiB
// of entrypoint and of cmd, 64 labels and 256 env names, so one record or
// stored answer can be hundreds of KiB, and thousands of them gigabytes.

// Defaults of the caps. The byte budgets are set so that for ordinary
// records (about 1 KiB: an id, a template, a few labels) the counts bind
// first (1,000 records or 10,000 answers of 1 KiB are 1 MiB and 10 MiB),
// and the budgets only for large ones: 16 MiB is, for example, 16 answers
// or records of the largest size (about 1 MiB each).
const (
	DefaultMaxRetainedPerAccount         = 1000
	DefaultMaxIdempotencyKeysPerAccount  = 10000
	DefaultMaxRetainedBytesPerAccount    = 16 << 20
	DefaultMaxIdempotencyBytesPerAccount = 16 << 20
)

// recordOverhead is what a record holds besides its variable fields
// (ids, statuses, instants, numbers), roughly, as recordBytes counts it.
const recordOverhead = 512

// recordBytes estimates what an ended sandbox's record holds in memory
// (and, near enough, on disk): its fixed part and every field a create
// or its end can make large. It is the one place that sizes a record for
// MaxRetainedBytesPerAccount.
func recordBytes(sb *store.Sandbox) int64 {
	n := recordOverhead + len(sb.ID) + len(sb.Account) + len(sb.Template) + len(sb.Image) +
		len(sb.TerminationReason) + len(sb.TerminationMessage) + len(sb.Logs) +
		len(sb.IdempotencyKey) + len(sb.RequestHash) + len(sb.EgressMode) + len(sb.EgressIP) + len(sb.ContainerID)
	for _, l := range [][]string{sb.Entrypoint, sb.Cmd, sb.EnvKeys, sb.EgressAllowlist} {
		for _, v := range l {
			n += len(v)
		}
	}
	for _, mp := range []map[string]string{sb.Env, sb.Labels, sb.Files} {
		for k, v := range mp {
			n += len(k) + len(v)
		}
	}
	return int64(n)
}

// keyBytes is what a settled idempotency key holds, for
// MaxIdempotencyBytesPerAccount: its stored answer and its name.
func keyBytes(rec *store.Idempotency) int64 {
	return int64(len(rec.Body) + len(rec.Key) + len(rec.RequestHash) + len(rec.SandboxID))
}

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
// has more than MaxRetainedPerAccount of them, or more than
// MaxRetainedBytesPerAccount of records, as a DELETE would: the record (and
// its log file) first, then in the background what may be left of its
// container and egress rules.
func (m *Manager) trimRetainedLocked(account string) {
	for {
		a := m.accounts[account]
		if a == nil {
			return
		}
		a.ended.weigh(func(id string) int64 { return recordBytes(a.boxes[id].sb) })
		if a.ended.len() <= m.cfg.MaxRetainedPerAccount && a.ended.bytes <= m.cfg.MaxRetainedBytesPerAccount {
			return
		}
		sb := a.boxes[a.ended.oldest()].sb
		m.log.Info("forgetting an ended sandbox before its retention ends: its account is past its cap on retained sandboxes",
			"sandbox", sb.ID, "account", account, "cap", m.cfg.MaxRetainedPerAccount,
			"bytes", a.ended.bytes, "byteCap", m.cfg.MaxRetainedBytesPerAccount)
		m.forgetLocked(sb) // a failed delete is logged by the writer
		m.removeDeletedLocked(sb)
	}
}

// trackKeyLocked counts a settled idempotency key, and what it keeps,
// against its account's caps and forgets the account's oldest keys past
// them.
func (m *Manager) trackKeyLocked(mapKey string, e *idemEntry) {
	m.accountLocked(e.rec.Account).keys.addSized(mapKey, e.rec.CreatedAt, m.nextSeqLocked(), keyBytes(&e.rec))
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
// more than MaxIdempotencyKeysPerAccount of them, or they keep more than
// MaxIdempotencyBytesPerAccount.
func (m *Manager) trimKeysLocked(account string) {
	for {
		a := m.accounts[account]
		if a == nil {
			return
		}
		a.keys.weigh(func(mapKey string) int64 {
			if e := m.idem[mapKey]; e != nil {
				return keyBytes(&e.rec)
			}
			return 0
		})
		if a.keys.len() <= m.cfg.MaxIdempotencyKeysPerAccount && a.keys.bytes <= m.cfg.MaxIdempotencyBytesPerAccount {
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
