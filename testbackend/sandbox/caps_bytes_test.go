package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// bigJob is a run-mode create whose record and answer are large: its
// entrypoint and cmd are near MaxArgBytes, of the characters json.Marshal
// escapes for HTML.
func bigJob() CreateRequest {
	return CreateRequest{
		Entrypoint: []string{"/bin/sh", strings.Repeat("<", MaxArgBytes-16)},
		Cmd:        []string{strings.Repeat("&", MaxArgBytes-16)},
		Labels:     map[string]string{"team": strings.Repeat(">", MaxLabelValueLen)},
	}
}

// newBytesManager is a test-mode manager with the per-account byte
// budgets set (0: the default).
func newBytesManager(t *testing.T, dir string, retainedBytes, keyBytes int64) (*Manager, *store.Store) {
	t.Helper()
	m := newManagerWith(t, Config{Mode: ModeTest, Runtime: testRuntime(t, dir),
		MaxRetainedBytesPerAccount: retainedBytes, MaxIdempotencyBytesPerAccount: keyBytes}, dir)
	return m, m.st
}

// keptKeyBytes adds up what the account's settled keys keep, from the
// keys themselves (not the index's running total), and checks the total
// against the index's.
func keptKeyBytes(t *testing.T, m *Manager, account string) (n int, bytes int64) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.idem {
		if e.done && e.rec.Account == account {
			n++
			bytes += keyBytes(&e.rec)
		}
	}
	if a := m.accounts[account]; a != nil {
		a.keys.weigh(func(string) int64 { return 0 }) // every key is weighed already
		if a.keys.bytes != bytes {
			t.Fatalf("the index counts %d bytes of keys, the keys hold %d", a.keys.bytes, bytes)
		}
	}
	return n, bytes
}

// retainedBytes adds up the ended records of account "acct", from the records.
func retainedBytes(t *testing.T, m *Manager) (n int, bytes int64) {
	const account = "acct"
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sb := range m.boxes {
		if sb.Account == account && !isLive(sb.Status) {
			n++
			bytes += recordBytes(sb)
		}
	}
	if a := m.accounts[account]; a != nil && a.ended.bytes != bytes {
		t.Fatalf("the index counts %d bytes of ended records, the records hold %d", a.ended.bytes, bytes)
	}
	return n, bytes
}

// TestIdempotencyBytesCapForgetsTheOldestKeys: an account that settles
// many keys with large answers keeps at most its byte budget of them,
// the newest; the oldest are forgotten first (a create with one makes a
// new sandbox), on disk too, and a start with a lower budget applies it.
// A kept answer is not inflated by HTML escapes.
func TestIdempotencyBytesCapForgetsTheOldestKeys(t *testing.T) {
	const budget = 1 << 20
	const keys = 24
	dir := t.TempDir()
	ctx := context.Background()
	m, st := newBytesManager(t, dir, 0, budget)
	ids := make([]string, keys)
	var one int64
	for i := range keys {
		res, err := m.Create(ctx, "acct", fmt.Sprintf("k%d", i), bigJob())
		if err != nil || res.Replayed {
			t.Fatalf("k%d: %+v %v", i, res, err)
		}
		ids[i] = res.Sandbox.ID
		if _, err := m.Create(ctx, "other", fmt.Sprintf("k%d", i), CreateRequest{Cmd: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			_, one = keptKeyBytes(t, m, "acct")
			if raw := int64(2 * MaxArgBytes); one > raw+raw/4 {
				t.Fatalf("one kept answer is %d bytes for %d bytes of arguments: escaped for HTML?", one, raw)
			}
			m.mu.Lock()
			body := m.idem["acct\x00k0"].rec.Body
			m.mu.Unlock()
			var kept View
			if err := json.Unmarshal(body, &kept); err != nil || !reflect.DeepEqual(kept, res.Sandbox) {
				t.Fatalf("the kept answer reads back as %+.200v (%v), want the first answer", kept, err)
			}
		}
		if _, b := keptKeyBytes(t, m, "acct"); b > budget {
			t.Fatalf("after k%d acct's keys keep %d bytes, over the budget of %d", i, b, budget)
		}
		mustCheckIndex(t, m, "after a large create with a key")
	}
	n, b := keptKeyBytes(t, m, "acct")
	if b+one+16 <= budget { // the trim stops as soon as the rest fits
		t.Fatalf("acct keeps %d keys of %d bytes, want as many of the newest as fit in %d", n, b, budget)
	}
	if n, _ := keptKeyBytes(t, m, "other"); n != keys {
		t.Fatalf("the other account keeps %d keys, want all %d: the budget is per account", n, keys)
	}
	newest := keys - 1
	if res, err := m.Create(ctx, "acct", fmt.Sprintf("k%d", newest), bigJob()); err != nil || !res.Replayed || res.Sandbox.ID != ids[newest] {
		t.Fatalf("the newest key: %+v %v, want a replay of %s", res, err, ids[newest])
	}
	oldestKept := keys - n
	if res, err := m.Create(ctx, "acct", fmt.Sprintf("k%d", oldestKept), bigJob()); err != nil || !res.Replayed || res.Sandbox.ID != ids[oldestKept] {
		t.Fatalf("the oldest key kept: %+v %v, want a replay of %s", res, err, ids[oldestKept])
	}
	if res, err := m.Create(ctx, "acct", fmt.Sprintf("k%d", oldestKept-1), bigJob()); err != nil || res.Replayed {
		t.Fatalf("a key past the budget: %+v %v, want a new sandbox (the key was forgotten)", res, err)
	}
	m.Close()
	onDisk := func() (n int, bytes int64) {
		recs, err := st.Idempotencies()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Account == "acct" {
				n++
				bytes += keyBytes(r)
			}
		}
		return n, bytes
	}
	if n, b := onDisk(); b > budget || n == 0 {
		t.Fatalf("acct's keys on disk: %d keeping %d bytes, want some within %d", n, b, budget)
	}

	// Started again with half the budget: the keys it finds (the
	// sandboxes' records still carry theirs) are held to it.
	m2, _ := newBytesManager(t, dir, 0, budget/2)
	mustCheckIndex(t, m2, "after a restart")
	n2, b2 := keptKeyBytes(t, m2, "acct")
	if b2 > budget/2 || n2 == 0 {
		t.Fatalf("after a restart with half the budget acct keeps %d keys of %d bytes, want some within %d", n2, b2, budget/2)
	}
	m2.Close()
	if _, b := onDisk(); b > budget/2 {
		t.Fatalf("after a restart with half the budget acct's keys keep %d bytes on disk", b)
	}
}

// TestRetainedBytesCapForgetsTheOldestFirst: an account whose ended
// sandboxes have large records keeps at most its byte budget of them, the
// newest; the oldest answer NOT_FOUND, as after a DELETE, and their
// records leave the disk; a start with a lower budget applies it.
func TestRetainedBytesCapForgetsTheOldestFirst(t *testing.T) {
	const budget = 1 << 20
	const jobs = 24
	dir := t.TempDir()
	ctx := context.Background()
	m, st := newBytesManager(t, dir, budget, 0)
	ids := make([]string, jobs)
	var one int64
	for i := range jobs {
		res, err := m.Create(ctx, "acct", "", bigJob())
		if err != nil {
			t.Fatal(err)
		}
		if res.Sandbox.Status == StatusPending || res.Sandbox.Status == StatusRunning {
			t.Fatalf("a test-mode job is %s, want it ended at once", res.Sandbox.Status)
		}
		ids[i] = res.Sandbox.ID
		if i == 0 {
			_, one = retainedBytes(t, m)
		}
		if _, b := retainedBytes(t, m); b > budget {
			t.Fatalf("after job %d acct's ended records hold %d bytes, over the budget of %d", i, b, budget)
		}
		mustCheckIndex(t, m, "after a large job")
	}
	n, b := retainedBytes(t, m)
	if b+one+16 <= budget { // the trim stops as soon as the rest fits
		t.Fatalf("acct keeps %d ended sandboxes of %d bytes, want as many of the newest as fit in %d", n, b, budget)
	}
	for i, id := range ids {
		_, err := m.Get("acct", id)
		var e *Error
		switch kept := i >= jobs-n; {
		case kept && err != nil:
			t.Fatalf("job %d, among the newest: %v", i, err)
		case !kept && (!errors.As(err, &e) || e.Code != CodeNotFound):
			t.Fatalf("job %d, among the oldest: %v, want NOT_FOUND", i, err)
		}
	}
	if got := len(m.List("acct", nil)); got != n {
		t.Fatalf("acct lists %d sandboxes, want %d", got, n)
	}
	m.Close()
	records, _ := storedIDs(t, st)
	if len(records) != n {
		t.Fatalf("%d records on disk, want the %d kept", len(records), n)
	}

	m2, _ := newBytesManager(t, dir, budget/2, 0)
	mustCheckIndex(t, m2, "after a restart")
	if n2, b2 := retainedBytes(t, m2); b2 > budget/2 || n2 == 0 {
		t.Fatalf("after a restart with half the budget acct keeps %d ended sandboxes of %d bytes, want some within %d", n2, b2, budget/2)
	}
}
