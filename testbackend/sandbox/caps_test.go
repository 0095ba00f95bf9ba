package sandbox

import (
	"context"
	"errors"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// newCappedManager is newManager with the per-account caps set.
func newCappedManager(t *testing.T, rt container.Runtime, dir string, retained, keys int) (*Manager, *store.Store) {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeTest, Runtime: rt, Store: st, MaxRetainedPerAccount: retained, MaxIdempotencyKeysPerAccount: keys})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, st
}

// nextMillisecond waits until the clock has passed the millisecond of
// after (records keep milliseconds), so that the next record is younger
// by its time, not only by the order it came in.
func nextMillisecond(after string) {
	at, _ := time.Parse(TimeFormat, after)
	for !time.Now().UTC().Truncate(time.Millisecond).After(at) {
		time.Sleep(time.Millisecond)
	}
}

func listIDs(m *Manager, account string) []string {
	var ids []string
	for _, v := range m.List(account, nil) {
		ids = append(ids, v.ID)
	}
	sort.Strings(ids)
	return ids
}

func idsOf(vs ...View) []string {
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	sort.Strings(ids)
	return ids
}

func storedIDs(t *testing.T, st *store.Store) (records, logs []string) {
	t.Helper()
	recs, err := st.Sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		records = append(records, r.ID)
	}
	if logs, err = st.LogIDs(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(records)
	sort.Strings(logs)
	return records, logs
}

// TestRetainedCapForgetsTheOldestFirst: an account past its cap on ended
// sandboxes loses its oldest ones first, records and log files, while
// its live sandboxes and other accounts' records stay; a start with a
// lower cap applies it to the records it finds.
func TestRetainedCapForgetsTheOldestFirst(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	m, st := newCappedManager(t, newPrintingRuntime(t, dir, []byte("printed\n")), dir, 3, 0)
	live, err := m.Create(ctx, "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var jobs, others []View
	last := live.Sandbox.CreatedAt
	for i := range 5 {
		nextMillisecond(last)
		res, err := m.Create(ctx, "acct", "", CreateRequest{Run: true})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, res.Sandbox)
		last = res.Sandbox.CreatedAt
		mustCheckIndex(t, m, "after a job")
		if i < 2 {
			res, err := m.Create(ctx, "other", "", CreateRequest{Run: true})
			if err != nil {
				t.Fatal(err)
			}
			others = append(others, res.Sandbox)
		}
	}
	if got, want := listIDs(m, "acct"), idsOf(live.Sandbox, jobs[2], jobs[3], jobs[4]); !slices.Equal(got, want) {
		t.Fatalf("acct lists %v, want the live sandbox and the 3 newest jobs %v", got, want)
	}
	for _, j := range jobs[:2] {
		var e *Error
		if _, err := m.Get("acct", j.ID); !errors.As(err, &e) || e.Code != CodeNotFound {
			t.Fatalf("an oldest job %s: %v, want NOT_FOUND", j.ID, err)
		}
	}
	if got, want := listIDs(m, "other"), idsOf(others...); !slices.Equal(got, want) {
		t.Fatalf("the other account lists %v, want %v", got, want)
	}
	m.Close()
	records, logs := storedIDs(t, st)
	if want := idsOf(live.Sandbox, jobs[2], jobs[3], jobs[4], others[0], others[1]); !slices.Equal(records, want) {
		t.Fatalf("records on disk %v, want %v", records, want)
	}
	if want := idsOf(jobs[2], jobs[3], jobs[4], others[0], others[1]); !slices.Equal(logs, want) {
		t.Fatalf("log files %v, want %v", logs, want)
	}

	// Started again with a cap of 2: the oldest of the three goes.
	m2, _ := newCappedManager(t, testRuntime(t, dir), dir, 2, 0)
	mustCheckIndex(t, m2, "after a restart")
	if got, want := listIDs(m2, "acct"), idsOf(live.Sandbox, jobs[3], jobs[4]); !slices.Equal(got, want) {
		t.Fatalf("after a restart with a lower cap acct lists %v, want %v", got, want)
	}
	if got := logsOf(t, m2, jobs[4].ID); got != "printed\n" {
		t.Fatalf("logs of a kept job: %q", got)
	}
	m2.Close()
	if _, logs := storedIDs(t, st); !slices.Equal(logs, idsOf(jobs[3], jobs[4], others[0], others[1])) {
		t.Fatalf("log files after the restart: %v", logs)
	}
}

// TestIdempotencyCapForgetsTheOldestKeys: past the cap an account's
// oldest keys are forgotten (a create with one makes a new sandbox), the
// newer ones still replay, the same after a restart, and no more keys
// than the cap are on disk.
func TestIdempotencyCapForgetsTheOldestKeys(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	m, st := newCappedManager(t, testRuntime(t, dir), dir, 0, 3)
	first := map[string]string{}
	var last string
	for _, k := range []string{"k1", "k2", "k3", "k4", "k5"} {
		if last != "" {
			nextMillisecond(last)
		}
		res, err := m.Create(ctx, "acct", k, CreateRequest{})
		if err != nil || res.Replayed {
			t.Fatalf("%s: %+v %v", k, res, err)
		}
		first[k], last = res.Sandbox.ID, res.Sandbox.CreatedAt
		mustCheckIndex(t, m, "after a create with a key")
	}
	if _, err := m.Create(ctx, "other", "k1", CreateRequest{}); err != nil {
		t.Fatal(err) // another account's keys count for it alone
	}
	replays := func(m *Manager, k, id string) {
		t.Helper()
		res, err := m.Create(ctx, "acct", k, CreateRequest{})
		if err != nil || !res.Replayed || res.Sandbox.ID != id {
			t.Fatalf("%s: %+v %v, want a replay of %s", k, res, err, id)
		}
	}
	makesNew := func(m *Manager, k string) string {
		t.Helper()
		res, err := m.Create(ctx, "acct", k, CreateRequest{})
		if err != nil || res.Replayed || res.Sandbox.ID == first[k] {
			t.Fatalf("%s: %+v %v, want a new sandbox (the key was forgotten)", k, res, err)
		}
		return res.Sandbox.ID
	}
	for _, k := range []string{"k3", "k4", "k5"} {
		replays(m, k, first[k])
	}
	nextMillisecond(last)
	k1 := makesNew(m, "k1") // forgets k3
	mustCheckIndex(t, m, "after a forgotten key came again")
	replays(m, "k1", k1)
	m.Close()
	keys, err := st.Idempotencies()
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	for _, k := range keys {
		if k.Account == "acct" {
			onDisk = append(onDisk, k.Key)
		}
	}
	if sort.Strings(onDisk); !slices.Equal(onDisk, []string{"k1", "k4", "k5"}) {
		t.Fatalf("acct's keys on disk: %v, want k1 k4 k5", onDisk)
	}

	// Started again (the sandboxes of k2 and k3 still carry their keys):
	// the newest three still replay, the older ones are forgotten.
	m2, _ := newCappedManager(t, testRuntime(t, dir), dir, 0, 3)
	mustCheckIndex(t, m2, "after a restart")
	replays(m2, "k4", first["k4"])
	replays(m2, "k5", first["k5"])
	replays(m2, "k1", k1)
	makesNew(m2, "k3")
	mustCheckIndex(t, m2, "after a forgotten key came again")
}

// TestExpiredKeysLeaveTheCount: a key whose TTL ran out leaves its
// account's count (and an account left with nothing its index).
func TestExpiredKeysLeaveTheCount(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeTest, Runtime: testRuntime(t, dir), Store: st, IdempotencyTTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := m.Create(context.Background(), "acct", "k", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(context.Background(), "acct", res.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	mustCheckIndex(t, m, "after the delete")
	deadline := time.Now().Add(time.Minute)
	for {
		m.mu.Lock()
		n := len(m.idem)
		m.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the key is still there a minute after its TTL")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mustCheckIndex(t, m, "after the key expired")
}
