package main

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// memAvailableKB is the host's MemAvailable, or 0 when unknown.
func memAvailableKB() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb
		}
	}
	return 0
}

// floorIdleMemory starts n raw containers at once, lets them settle, and
// returns the drop of the host's available memory per container.
func floorIdleMemory(ctx context.Context, f *floorRig, n int) (int64, error) {
	before := memAvailableKB()
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); ids[i], errs[i] = f.d.Start(ctx, f.spec(sandbox.ImageBase)) }()
	}
	wg.Wait()
	time.Sleep(2 * time.Second)
	after := memAvailableKB()
	live := 0
	for i, id := range ids {
		if errs[i] == nil {
			live++
			wg.Add(1)
			go func() { defer wg.Done(); _ = f.d.Remove(ctx, id) }()
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return (before - after) / int64(live), nil
}
