package main

import (
	"strings"
	"testing"
	"time"
)

func TestCPUCostAndCapacity(t *testing.T) {
	var c cpuCost
	if c.per() != 0 {
		t.Fatal("no samples must cost 0")
	}
	_ = c.measure(func() error { return nil })
	_ = c.measure(func() error { return nil })
	if c.n != 2 || !strings.HasSuffix(c.String(), "(2 samples)") {
		t.Fatalf("cost %+v prints %q", c, c.String())
	}
	// 800 + 2×100 + 200 ms a sandbox at 1/s is 1.2 s of CPU a second.
	note := capacityNote(800*time.Millisecond, 100*time.Millisecond, 200*time.Millisecond, 1, 2)
	if !strings.HasPrefix(note, "60% of this host's 2 CPUs at 1 sandboxes/s") {
		t.Fatalf("capacity note %q", note)
	}
}

func TestWarmCost(t *testing.T) {
	// 30 s of CPU over 20 sandboxes, 15 s of it in a 10 s row on 2 CPUs.
	got := warmCost(30*time.Second, 20, 15*time.Second, 10*time.Second, 2)
	if want := "1500 ms per sandbox; 75% of this host's 2 CPUs busy during the row"; got != want {
		t.Fatalf("warmCost = %q, want %q", got, want)
	}
	if got := warmCost(time.Second, 0, time.Second, time.Second, 2); got != "not measured" {
		t.Fatalf("no sandboxes: %q", got)
	}
}
