package sandbox

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/testmode"
)

// gatedStarts is the test mode's runtime (a start at once) whose first
// start waits for release, and whose starts fail once fail is set.
type gatedStarts struct {
	*testmode.Runtime
	starts  atomic.Int32
	entered chan struct{} // closed when the first start begins
	release chan struct{}
	fail    atomic.Bool
}

func (g *gatedStarts) Start(ctx context.Context, spec container.Spec) (string, error) {
	if g.starts.Add(1) == 1 {
		close(g.entered)
		<-g.release
	}
	if g.fail.Load() {
		return "", errors.New("start refused by the test")
	}
	return g.Runtime.Start(ctx, spec)
}

// TestAdmissionComesBeforeTheStartAtOnce: on the test mode's runtime a
// create starts its sandbox before its record is written, off the lock.
// Its vCPUs are held from its admission: a create racing it for the last
// ones is refused (VCPU_LIMIT_EXCEEDED) without starting anything, and a
// start that fails gives them back.
func TestAdmissionComesBeforeTheStartAtOnce(t *testing.T) {
	dir := t.TempDir()
	tm, err := testmode.Open(filepath.Join(dir, "testmode"))
	if err != nil {
		t.Fatal(err)
	}
	rt := &gatedStarts{Runtime: tm, entered: make(chan struct{}), release: make(chan struct{})}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeTest, Runtime: rt, Store: st, VCPULimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first := make(chan error, 1)
	go func() {
		_, err := m.Create(ctx, "a", "", CreateRequest{}) // base: 1 vCPU, the limit
		first <- err
	}()
	<-rt.entered // the first create's start runs, and the lock is free
	_, err = m.Create(ctx, "a", "", CreateRequest{})
	wantCode(t, err, CodeVCPULimitExceeded)
	if n := rt.starts.Load(); n != 1 {
		t.Fatalf("the refused create started a container: %d starts", n)
	}
	close(rt.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	mustCheckIndex(t, m, "after the creates")
	if used, _ := m.VCPUUsage("a"); used != 1 {
		t.Fatalf("account a uses %v vCPUs, want 1", used)
	}

	rt.fail.Store(true)
	if _, err := m.Create(ctx, "b", "", CreateRequest{}); err == nil {
		t.Fatal("a create whose start fails succeeded")
	}
	mustCheckIndex(t, m, "after a failed start")
	if used, _ := m.VCPUUsage("b"); used != 0 {
		t.Fatalf("account b uses %v vCPUs after its start failed", used)
	}
}
