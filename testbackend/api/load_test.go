package api_test

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// TestLoad keeps many sandboxes alive and sends commands to them from
// concurrent clients. `make test` runs a small version; RARECLOUD_SOAK=1
// runs it at the soak's size (50 sandboxes, 2,000 commands; `make soak`
// runs the bench's soak, which measures the floor beside it). Nothing may fail
// except documented back-pressure (429 with Retry-After, retried), and
// afterwards no container, goroutine or file descriptor may be left.
// Not parallel: it counts the process's goroutines and descriptors.
func TestLoad(t *testing.T) {
	sandboxes, commands, clients := 8, 200, 16
	if os.Getenv("RARECLOUD_SOAK") == "1" {
		sandboxes, commands, clients = 50, 2000, 40
	}
	goroutinesBefore, fdsBefore := goruntime.NumGoroutine(), openFDs(t)
	dir := t.TempDir()
	b, err := startBackend(dir, testbackend.Config{MaxInFlight: clients / 2})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, b.URL())

	start := time.Now()
	ids := make([]string, sandboxes)
	var wg sync.WaitGroup
	var mu sync.Mutex
	throttled, failures := 0, []string{}
	// retry honours 429 with Retry-After, as a client must.
	retry := func(f func() apitest.Response) apitest.Response {
		for {
			r := f()
			if r.Status != 429 {
				return r
			}
			if r.Header.Get("Retry-After") == "" {
				mu.Lock()
				failures = append(failures, "429 without Retry-After")
				mu.Unlock()
			}
			mu.Lock()
			throttled++
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := retry(func() apitest.Response {
				return c.Do("POST", "/sandboxes", tokA, map[string]any{"labels": map[string]string{"load": "1"}, "timeoutMs": 900000}, nil)
			})
			if r.Status != 201 {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("create: %d %+v", r.Status, r.Env.Error))
				mu.Unlock()
				return
			}
			ids[i] = apitest.DecodeData[apitest.Sandbox](t, r).ID
		}()
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("creates failed: %v", failures)
	}
	for _, id := range ids {
		c.WaitStatus(tokA, id, apitest.WaitTimeout, "running")
	}
	t.Logf("%d sandboxes running after %v", sandboxes, time.Since(start))

	latencies := make([]time.Duration, 0, commands)
	jobs := make(chan int)
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				id := ids[i%len(ids)]
				t0 := time.Now()
				r := retry(func() apitest.Response {
					return c.Do("POST", "/sandboxes/"+id+"/commands", tokA, map[string]any{"cmd": "echo " + strconv.Itoa(i)}, nil)
				})
				d := time.Since(t0)
				mu.Lock()
				if r.Status != 200 {
					failures = append(failures, fmt.Sprintf("command: %d %+v", r.Status, r.Env.Error))
				} else if out := apitest.DecodeData[apitest.ExecResult](t, r); out.Stdout != strconv.Itoa(i)+"\n" {
					failures = append(failures, fmt.Sprintf("command %d answered %q", i, out.Stdout))
				} else {
					latencies = append(latencies, d)
				}
				mu.Unlock()
			}
		}()
	}
	t0 := time.Now()
	for i := 0; i < commands; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(t0)
	if len(failures) > 0 {
		t.Fatalf("%d failures, first: %v", len(failures), failures[0])
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	p := func(q float64) time.Duration { return latencies[int(float64(len(latencies)-1)*q)] }
	t.Logf("%d commands over %d sandboxes from %d clients in %v: p50 %v p95 %v p99 %v max %v; %d answers were 429 and retried",
		commands, sandboxes, clients, elapsed.Round(time.Millisecond), p(0.5).Round(time.Millisecond), p(0.95).Round(time.Millisecond), p(0.99).Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond), throttled)

	for _, id := range ids {
		if r := c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil); r.Status != 200 {
			t.Errorf("delete %s: %d", id, r.Status)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Deletes answer before their containers are removed.
	if err := b.Manager().AwaitRemovals(ctx); err != nil {
		t.Fatal(err)
	}
	if cs, err := b.Runtime().List(ctx); err != nil || len(cs) != 0 {
		t.Errorf("containers left after deleting every sandbox: %d (%v)", len(cs), err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	c.HTTP.CloseIdleConnections()
	// Goroutines wind down asynchronously; give them a moment, with backoff.
	wait := 10 * time.Millisecond
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); wait = min(wait*2, time.Second) {
		if goruntime.NumGoroutine() <= goroutinesBefore+2 && openFDs(t) <= fdsBefore+2 {
			break
		}
		time.Sleep(wait)
	}
	if g := goruntime.NumGoroutine(); g > goroutinesBefore+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after\n%s", goroutinesBefore, g, buf[:goruntime.Stack(buf, true)])
	}
	if f := openFDs(t); f > fdsBefore+2 {
		t.Errorf("file descriptors: %d before, %d after", fdsBefore, f)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
