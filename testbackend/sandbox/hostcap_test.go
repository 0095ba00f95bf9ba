package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// newCapManager is a started manager on rt with cfg's host bounds.
func newCapManager(t *testing.T, rt container.Runtime, mode string, cfg Config) *Manager {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Mode, cfg.Runtime, cfg.Store = mode, rt, st
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

// wantRefused checks that err is the host's refusal code, naming what.
func wantRefused(t *testing.T, err error, code, what string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != code || !strings.Contains(e.Message, what) {
		t.Fatalf("want %s naming %q, got %v", code, what, err)
	}
	if code == CodeHostCapacityExhausted && e.RetryAfter < 1 {
		t.Fatalf("%s without Retry-After: %+v", code, e)
	}
}

// freeDisk is a file system whose free space the test sets.
type freeDisk struct{ avail atomic.Int64 }

func (f *freeDisk) free(string) (int64, error) { return f.avail.Load(), nil }

// TestCreateRefusedOnAFullDisk: while the data directory's file system has
// less free space than the reserve, a create answers 503
// HOST_CAPACITY_EXHAUSTED naming the disk, with Retry-After, and leaves no
// record; with enough space reported the same create succeeds, and a
// freed disk is seen by the next creates without a restart.
func TestCreateRefusedOnAFullDisk(t *testing.T) {
	disk := &freeDisk{}
	disk.avail.Store(100 << 20)
	m := newCapManager(t, testRuntime(t, t.TempDir()), ModeTest, Config{DiskReserve: 1 << 30, FreeDisk: disk.free})
	m.diskSpace.maxAge = 10 * time.Millisecond
	_, err := m.Create(context.Background(), "acct", "", CreateRequest{})
	wantRefused(t, err, CodeHostCapacityExhausted, "disk")
	if ids := listIDs(m, "acct"); len(ids) != 0 {
		t.Fatalf("a refused create left sandboxes %v", ids)
	}

	disk.avail.Store(2 << 30)
	deadline := time.Now().Add(bounded)
	for {
		_, err = m.Create(context.Background(), "acct", "", CreateRequest{})
		if err == nil {
			break
		}
		wantRefused(t, err, CodeHostCapacityExhausted, "disk")
		if time.Now().After(deadline) {
			t.Fatalf("a disk with room again still refused creates after %v", bounded)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The positive control: the same reserve with room from the start.
	roomy := &freeDisk{}
	roomy.avail.Store(1<<30 + 1)
	m2 := newCapManager(t, testRuntime(t, t.TempDir()), ModeTest, Config{DiskReserve: 1 << 30, FreeDisk: roomy.free})
	if _, err := m2.Create(context.Background(), "acct", "", CreateRequest{}); err != nil {
		t.Fatalf("a disk with room: %v", err)
	}
}

// stuckDisk answers its first statfs and hangs in every later one.
type stuckDisk struct {
	calls atomic.Int32
	gate  chan struct{}
}

func (s *stuckDisk) free(string) (int64, error) {
	if s.calls.Add(1) > 1 {
		<-s.gate
	}
	return 10 << 30, nil
}

// TestDiskSampleHoldsUpNoCreate: a file system whose statfs hangs holds up
// no create: the check reads the last sample, and the next one is taken
// off the lock.
func TestDiskSampleHoldsUpNoCreate(t *testing.T) {
	disk := &stuckDisk{gate: make(chan struct{})}
	defer close(disk.gate)
	m := newCapManager(t, testRuntime(t, t.TempDir()), ModeTest, Config{FreeDisk: disk.free})
	m.diskSpace.maxAge = 0 // every check asks for a new sample
	within(t, "creates while statfs hangs", func() {
		for range 3 {
			if _, err := m.Create(context.Background(), "acct", "", CreateRequest{}); err != nil {
				t.Error(err)
			}
		}
	})
	if n := disk.calls.Load(); n != 2 {
		t.Fatalf("statfs called %d times, want the first sample and one hanging refresh", n)
	}
}

// TestCreateRefusedWhenAddressesAreTaken: on a sandbox network with four
// addresses and a host share of 75%, one account holds at most three (409
// HOST_SHARE_EXCEEDED naming the addresses); another account takes the
// fourth, and the create after it answers 503 HOST_CAPACITY_EXHAUSTED
// naming the addresses, with Retry-After, instead of a start that ends
// start_failed. A deleted sandbox's address is free again once its
// container is gone.
func TestCreateRefusedWhenAddressesAreTaken(t *testing.T) {
	rt := newFakeRuntime()
	m := newCapManager(t, rt, ModeReal, Config{Addresses: 4, HostShare: 0.75, HostMemoryBytes: -1})
	ctx := context.Background()
	var mine []string
	for range 3 {
		res, err := m.Create(ctx, "acct-a", "", CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, res.Sandbox.ID)
	}
	_, err := m.Create(ctx, "acct-a", "", CreateRequest{})
	wantRefused(t, err, CodeHostShareExceeded, "addresses")
	if _, err := m.Create(ctx, "acct-b", "", CreateRequest{}); err != nil {
		t.Fatalf("another account's create with an address left: %v", err)
	}
	_, err = m.Create(ctx, "acct-b", "", CreateRequest{})
	wantRefused(t, err, CodeHostCapacityExhausted, "addresses")

	if err := m.Delete(ctx, "acct-a", mine[0]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(bounded)
	for {
		_, err = m.Create(ctx, "acct-b", "", CreateRequest{})
		if err == nil {
			break
		}
		wantRefused(t, err, CodeHostCapacityExhausted, "addresses")
		if time.Now().After(deadline) {
			t.Fatalf("a deleted sandbox's address never came back: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCreateRefusedWhenOtherBackendsHoldTheAddresses: another backend on
// the same network holds leases this one has no record of. With 6 of 8
// addresses leased by it, this backend's third create is refused naming
// the other backends, before a container would find none; the count of
// the network's leases never refuses what this backend's own count
// allows (its own leases are among them); and once the other backend's
// leases go, creates pass again.
func TestCreateRefusedWhenOtherBackendsHoldTheAddresses(t *testing.T) {
	rt := newFakeRuntime()
	var theirs, ours atomic.Int64 // leases on the network, by owner
	theirs.Store(6)
	m := newCapManager(t, rt, ModeReal, Config{Addresses: 8, HostShare: 1, HostMemoryBytes: -1,
		NetworkLeases: func() (int, error) { return int(theirs.Load() + ours.Load()), nil }})
	m.leases.maxAge = 0 // every check asks for a new sample
	ctx := context.Background()
	// sampled waits until the sample counts n leases: the check reads the
	// last one and starts the next in the background.
	sampled := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(bounded); ; time.Sleep(time.Millisecond) {
			if v, ok := m.leases.sample(); ok && v == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sample never counted %d leases", n)
			}
		}
	}
	for range 2 {
		if _, err := m.Create(ctx, "acct", "", CreateRequest{}); err != nil {
			t.Fatal(err)
		}
		ours.Add(1)
	}
	sampled(8)
	_, err := m.Create(ctx, "acct", "", CreateRequest{})
	wantRefused(t, err, CodeHostCapacityExhausted, "6 of them by other backends")

	// Leases it does not see yet (its own starts racing the sample) are
	// this backend's own count's to bound: with the other backend gone,
	// a stale sample of 0 refuses nothing its records leave room for.
	theirs.Store(0)
	ours.Store(0)
	sampled(0)
	for range 6 {
		if _, err := m.Create(ctx, "acct", "", CreateRequest{}); err != nil {
			t.Fatalf("a create with addresses free: %v", err)
		}
	}
	_, err = m.Create(ctx, "acct-b", "", CreateRequest{})
	wantRefused(t, err, CodeHostCapacityExhausted, "8 live sandboxes")
}

// TestWarmContainersHoldAddresses: warm containers hold addresses too (one
// per template here, three), so with five addresses two sandboxes that
// claim none fit, and a third is refused.
func TestWarmContainersHoldAddresses(t *testing.T) {
	rt := newFakeRuntime()
	m := newCapManager(t, rt, ModeReal, Config{Addresses: 5, HostShare: 1, HostMemoryBytes: -1, PoolSize: 1})
	ctx, cancel := context.WithTimeout(context.Background(), bounded)
	defer cancel()
	if err := m.WaitPoolFull(ctx); err != nil {
		t.Fatal(err)
	}
	cold := CreateRequest{Env: map[string]string{"COLD": "1"}} // env: no warm container fits
	for range 2 {
		if _, err := m.Create(ctx, "acct", "", cold); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.Create(ctx, "acct", "", cold)
	wantRefused(t, err, CodeHostCapacityExhausted, "addresses")
}
