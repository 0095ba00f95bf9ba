package sandbox

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// TestRecordEncodedOffTheLock: handing a record to the writer under the
// manager's lock copies it and does no more; the writer encodes it. A
// record of the largest arguments (some 800 KB of JSON, a millisecond to
// encode) costs the lock's holder a few hundred bytes, so an account that
// PATCHes such a sandbox 64 times at once does not hold the lock every
// other account needs. What is written is the record as it was handed
// over, whatever changes it after.
func TestRecordEncodedOffTheLock(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, testRuntime(t, dir), ModeTest, dir)
	arg := strings.Repeat("\x01", MaxArgBytes/2) // escaped six times over
	big := []string{arg, arg}
	sb := &store.Sandbox{ID: "sbx-big", Account: "acct", Status: StatusExited, Template: "base", CreatedAt: time.Now().UTC(), Cmd: big, Entrypoint: big}

	// The writer is busy with the record's previous write, so that the
	// one handed over waits for it and nothing but the handing over runs
	// while it is measured.
	running, gate := make(chan struct{}), make(chan struct{})
	m.disk.enqueue("sandbox/"+sb.ID, "hold", func() error { close(running); <-gate; return nil })
	select {
	case <-running:
	case <-time.After(bounded):
		t.Fatal("the writer did not take the held write")
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m.mu.Lock()
	w := m.putSandboxLocked(sb)
	m.mu.Unlock()
	runtime.ReadMemStats(&after)
	sb.Cmd = []string{"changed after"} // a change replaces a slice, as the lifecycle's do
	close(gate)
	if err := w.wait(); err != nil {
		t.Fatal(err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
		t.Errorf("handing a record of %d bytes of arguments to the writer allocated %d bytes under the lock: it was encoded there", 4*len(arg), got)
	}
	recs, err := m.st.Sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(recs, func(r *store.Sandbox) bool { return r.ID == sb.ID })
	if i < 0 || !slices.Equal(recs[i].Cmd, big) {
		t.Fatalf("the record written is not the one handed over")
	}
}
