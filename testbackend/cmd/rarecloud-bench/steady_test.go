package main

import (
	"sync"
	"testing"
	"time"
)

// TestAtRateIsOpenLoop: every index is called once, and a call does not
// wait for the ones before it (each here waits until all have started).
func TestAtRateIsOpenLoop(t *testing.T) {
	const n = 5
	var mu sync.Mutex
	seen := map[int]int{}
	all := make(chan struct{})
	atRate(1000, n, func(i int) {
		mu.Lock()
		seen[i]++
		if len(seen) == n {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			t.Errorf("call %d waited 5 s for the others to start: closed loop", i)
		}
	})
	for i := 0; i < n; i++ {
		if seen[i] != 1 {
			t.Fatalf("index %d called %d times, want once (%v)", i, seen[i], seen)
		}
	}
}
