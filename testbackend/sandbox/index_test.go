package sandbox

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"
)

// checkIndex is the debug check of the per-account indexes: it recomputes
// them by scanning every record, as List and the capacity check once did,
// and reports where the maintained ones differ.
func checkIndex(m *Manager) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := map[string][]string{}
	live := map[string]int64{}
	use := map[string]liveUse{}
	var total liveUse
	ended := map[string][]string{}
	liveIDs := map[string][]string{}
	for id, sb := range m.boxes {
		ids[sb.Account] = append(ids[sb.Account], id)
		if isLive(sb.Status) {
			liveIDs[sb.Account] = append(liveIDs[sb.Account], id)
			live[sb.Account] += milliVCPU(m.sandboxVCPU(sb))
			u := use[sb.Account]
			u.add(liveUse{mem: m.sandboxMemory(sb), count: 1})
			use[sb.Account] = u
			total.add(liveUse{mem: m.sandboxMemory(sb), count: 1})
		} else {
			ended[sb.Account] = append(ended[sb.Account], id)
		}
	}
	keys := map[string][]string{}
	for mapKey, e := range m.idem {
		if e.done {
			keys[e.rec.Account] = append(keys[e.rec.Account], mapKey)
		}
	}
	for account, a := range m.accounts {
		if a.heldMilli != 0 {
			return fmt.Errorf("account %s: the index holds %d milli-vCPUs with no create in flight", account, a.heldMilli)
		}
		if len(a.boxes) > 0 && ids[account] == nil {
			return fmt.Errorf("account %s: the index has %d sandboxes, the records none", account, len(a.boxes))
		}
		if len(a.boxes) == 0 && a.keys.len() == 0 {
			return fmt.Errorf("account %s: an empty index is kept", account)
		}
		if got, want := setKeys(&a.keys), sorted(keys[account]); !slices.Equal(got, want) {
			return fmt.Errorf("account %s: the index counts keys %q, the settled keys are %q", account, got, want)
		}
	}
	if m.live != total {
		return fmt.Errorf("the host's totals count %+v live, the records %+v", m.live, total)
	}
	if got, want := m.liveAccounts.Load(), int64(len(use)); got != want {
		return fmt.Errorf("%d accounts are counted with live sandboxes, the records have %d", got, want)
	}
	for account, want := range keys {
		if m.accounts[account] == nil {
			return fmt.Errorf("account %s has %d keys and no index", account, len(want))
		}
	}
	for account, want := range ids {
		a := m.accounts[account]
		if a == nil {
			return fmt.Errorf("account %s has %d records and no index", account, len(want))
		}
		var got []string
		for id, e := range a.boxes {
			if m.boxes[id] != e.sb {
				return fmt.Errorf("account %s: the index holds another record of %s", account, id)
			}
			got = append(got, id)
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			return fmt.Errorf("account %s: the index has sandboxes %v, the records %v", account, got, want)
		}
		if a.live != use[account] {
			return fmt.Errorf("account %s: the index counts %+v live, the records %+v", account, a.live, use[account])
		}
		if a.liveMilli != live[account] {
			return fmt.Errorf("account %s: the index counts %d milli-vCPUs live, the records %d", account, a.liveMilli, live[account])
		}
		if got, want := setKeys(&a.ended), sorted(ended[account]); !slices.Equal(got, want) {
			return fmt.Errorf("account %s: the index has ended sandboxes %v, the records %v", account, got, want)
		}
		var gotLive []string
		for id, sb := range a.liveBoxes {
			if m.boxes[id] != sb {
				return fmt.Errorf("account %s: the live index holds another record of %s", account, id)
			}
			gotLive = append(gotLive, id)
		}
		if got, want := sorted(gotLive), sorted(liveIDs[account]); !slices.Equal(got, want) {
			return fmt.Errorf("account %s: the index has live sandboxes %v, the records %v", account, got, want)
		}
	}
	return nil
}

// setKeys are an ageSet's members, sorted, after checking that its heap
// and its map agree.
func setKeys(s *ageSet) []string {
	var out []string
	for i, it := range s.h {
		if s.items[it.key] != it || it.index != i {
			return []string{"<heap and map disagree on " + it.key + ">"}
		}
		out = append(out, it.key)
	}
	if len(s.items) != len(s.h) {
		return []string{"<heap and map differ in size>"}
	}
	return sorted(out)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return s
}

func mustCheckIndex(t *testing.T, m *Manager, when string) {
	t.Helper()
	if err := checkIndex(m); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
}

// TestIndexesFollowEveryChange: through creates (cold, ended at once),
// starts, exits, failed starts, deletes and a restart, the per-account
// indexes agree with a scan of every record, and the vCPUs in use and the
// lists they answer are the scan's.
func TestIndexesFollowEveryChange(t *testing.T) {
	dir := t.TempDir()
	rt := newFakeRuntime()
	m := newManager(t, rt, ModeReal, dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mustCheckIndex(t, m, "empty")

	create := func(account string, req CreateRequest) string {
		t.Helper()
		res, err := m.Create(ctx, account, "", req)
		if err != nil {
			t.Fatal(err)
		}
		mustCheckIndex(t, m, "after a create")
		return res.Sandbox.ID
	}
	running := func(account, id string) {
		t.Helper()
		if v, err := m.WaitStatus(ctx, account, id, []string{StatusRunning}); err != nil || v.Status != StatusRunning {
			t.Fatalf("%s: %+v %v", id, v, err)
		}
		mustCheckIndex(t, m, "after a start")
	}
	ended := func(account, id string) {
		t.Helper()
		if v, err := m.WaitStatus(ctx, account, id, nil); err != nil || isLive(v.Status) {
			t.Fatalf("%s: %+v %v", id, v, err)
		}
		mustCheckIndex(t, m, "after an end")
	}
	usage := func(account string, want float64) {
		t.Helper()
		if used, _ := m.VCPUUsage(account); used != want {
			t.Fatalf("%s uses %v vCPUs, want %v", account, used, want)
		}
	}

	a1 := create("a", CreateRequest{})                     // base: 1 vCPU
	a2 := create("a", CreateRequest{Template: "python"})   // 2
	a3 := create("a", CreateRequest{Cmd: []string{"job"}}) // a job, 1
	b1 := create("b", CreateRequest{Template: "node"})     // 2
	for _, id := range []string{a1, a2, a3} {
		running("a", id)
	}
	running("b", b1)
	usage("a", 4)
	usage("b", 2)

	// The job's program ends; a1's keepalive dies.
	for _, id := range []string{a3, a1} {
		if err := rt.Remove(ctx, containerOf(t, m, id)); err != nil {
			t.Fatal(err)
		}
		ended("a", id)
	}
	usage("a", 2)
	if got := len(m.List("a", nil)); got != 3 {
		t.Fatalf("a lists %d sandboxes, want 3", got)
	}

	if err := m.Delete(ctx, "a", a2); err != nil {
		t.Fatal(err)
	}
	mustCheckIndex(t, m, "after a delete of a running sandbox")
	if err := m.Delete(ctx, "a", a3); err != nil {
		t.Fatal(err)
	}
	mustCheckIndex(t, m, "after a delete of an ended sandbox")
	usage("a", 0)
	usage("b", 2)

	// A sandbox still starting holds its vCPU until it is deleted.
	rt.mu.Lock()
	rt.coldGate = make(chan struct{})
	rt.mu.Unlock()
	pend := create("a", CreateRequest{})
	usage("a", 1) // pending holds its vCPU
	if err := m.Delete(ctx, "a", pend); err != nil {
		t.Fatal(err)
	}
	mustCheckIndex(t, m, "after a delete of a pending sandbox")
	usage("a", 0)
	rt.mu.Lock()
	close(rt.coldGate)
	rt.coldGate = nil
	rt.mu.Unlock()

	// Back after a restart, from the records on disk.
	m.Close()
	m2 := newManager(t, rt, ModeReal, dir)
	mustCheckIndex(t, m2, "after a restart")
	if used, _ := m2.VCPUUsage("b"); used != 2 {
		t.Fatalf("after a restart b uses %v vCPUs, want 2", used)
	}
	if got := m2.List("a", nil); len(got) != 1 || got[0].ID != a1 {
		t.Fatalf("after a restart a lists %+v, want only %s", got, a1)
	}
	if got := m2.List("b", map[string]string{"x": "y"}); len(got) != 0 {
		t.Fatalf("a label nobody has lists %+v", got)
	}
}
