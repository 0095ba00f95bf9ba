package hostcpu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// processCPU is this process's own user and system time.
func processCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBusyCountsThisProcess keeps every CPU busy in this process and
// checks that the host's busy time grew by at least as much (less a tick
// per CPU at each end): whatever else the host does only adds to it, and
// a count of idle time would not grow at all.
func TestBusyCountsThisProcess(t *testing.T) {
	before, own := Busy(), processCPU(t)
	if before == 0 {
		t.Fatal("Busy read nothing from /proc/stat")
	}
	cpus := runtime.NumCPU()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range cpus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
			}
		}()
	}
	for processCPU(t)-own < time.Duration(cpus)*300*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	burnt := processCPU(t) - own
	if got := Busy() - before; got < burnt-time.Duration(2*cpus)*10*time.Millisecond {
		t.Fatalf("host busy grew by %v while this process alone used %v", got, burnt)
	}
}
