package sandbox

import (
	"log/slog"
	"sync"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Records reach the disk off the manager's lock: the lock is held only to
// take a snapshot (a copy of the record as it is at that moment) and hand
// it to the writer, which encodes and writes it, so a slow fsync of one
// sandbox never delays a read, or a write, of another, and neither does
// the encoding of a large record (one create's arguments may take 800 KB
// of JSON, a millisecond of CPU, and an account may PATCH it 64 times at
// once). The copy shares the record's slices and maps: they are replaced
// when a record changes, never changed in place. Per record, writes go to disk one at a time and in
// the order they were handed over under the lock; a snapshot that is
// overtaken by a newer one before its turn is skipped, never written over
// the newer one. A caller that must not answer before its record is
// durable (create, delete) waits for its write after releasing the lock.

// recordWriter writes snapshots, one goroutine per record with writes
// pending; wg tracks them so Close can wait for the last one.
type recordWriter struct {
	st  *store.Store
	log *slog.Logger

	mu    sync.Mutex
	slots map[string]*recordSlot
	wg    sync.WaitGroup
}

// recordSlot is one record's queue: only the newest pending write is
// kept, with everyone waiting for an older one.
type recordSlot struct {
	next    func() error
	what    string
	waiters []*recordWrite
}

// recordWrite is a write handed to the writer. done is closed once it, or
// a newer write of the same record that replaced it, is on disk (or failed).
type recordWrite struct {
	done chan struct{}
	err  error
}

// wait blocks until the write is done and returns its error.
func (w *recordWrite) wait() error {
	<-w.done
	return w.err
}

func newRecordWriter(st *store.Store, log *slog.Logger) *recordWriter {
	return &recordWriter{st: st, log: log, slots: map[string]*recordSlot{}}
}

// enqueue hands op, the newest state of the record key, to the writer.
func (r *recordWriter) enqueue(key, what string, op func() error) *recordWrite {
	w := &recordWrite{done: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	sl := r.slots[key]
	if sl == nil {
		sl = &recordSlot{}
		r.slots[key] = sl
		r.wg.Add(1)
		go r.run(key, sl)
	}
	sl.next, sl.what = op, what
	sl.waiters = append(sl.waiters, w)
	return w
}

// run writes the record's newest snapshot until none is pending.
func (r *recordWriter) run(key string, sl *recordSlot) {
	defer r.wg.Done()
	for {
		r.mu.Lock()
		op, what, waiters := sl.next, sl.what, sl.waiters
		sl.next, sl.waiters = nil, nil
		if op == nil {
			delete(r.slots, key)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		err := op()
		if err != nil {
			r.log.Error("record not written", "record", key, "write", what, "err", err)
		}
		for _, w := range waiters {
			w.err = err
			close(w.done)
		}
	}
}

// encodeKept encodes what is kept (records, stored answers) as the store
// does (store.Encode, without HTML escapes). The API encodes its answers
// the same way (api.go, write), so a replay sends the same bytes.
func encodeKept(v any) ([]byte, error) { return store.Encode(v) }

// putSandboxLocked snapshots the record and hands it to the writer.
func (m *Manager) putSandboxLocked(sb *store.Sandbox) *recordWrite {
	snap := *sb
	return m.disk.enqueue("sandbox/"+snap.ID, "put", func() error {
		data, err := encodeKept(&snap)
		if err != nil {
			return err
		}
		return m.st.PutSandboxEncoded(snap.ID, data)
	})
}

// deleteSandboxLocked hands the removal of the record to the writer.
func (m *Manager) deleteSandboxLocked(id string) *recordWrite {
	return m.disk.enqueue("sandbox/"+id, "delete", func() error { return m.st.DeleteSandbox(id) })
}

// putIdempotencyLocked snapshots the key's record and hands it to the writer.
func (m *Manager) putIdempotencyLocked(rec *store.Idempotency) *recordWrite {
	snap := *rec
	return m.disk.enqueue("idempotency/"+rec.Account+"\x00"+rec.Key, "put", func() error { return m.st.PutIdempotency(&snap) })
}

// deleteIdempotencyLocked hands the removal of the key's record to the writer.
func (m *Manager) deleteIdempotencyLocked(account, key string) {
	m.disk.enqueue("idempotency/"+account+"\x00"+key, "delete", func() error { return m.st.DeleteIdempotency(account, key) })
}
