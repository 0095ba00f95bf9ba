package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// arrival is what one create of a steady-state run measured.
type arrival struct {
	fromPool bool          // the create answered running: a warm container was claimed
	create   time.Duration // the create call: HTTP, validation, record, claim
	wait     time.Duration // GET ?waitFor=running after it (0 when it answered running)
	first    time.Duration // the first call (a command or run_code)
	second   time.Duration // the same call again on the same sandbox
	total    time.Duration // create → first result
	err      error
}

// steady sends n creates at a fixed rate (open loop: the next create does
// not wait for the previous one), as users arriving would, while the pool
// refills on the same cores. Each arrival creates a sandbox, waits for it
// to run, makes the first call, makes it again, and deletes the sandbox.
func steady(ctx context.Context, c *client.Client, template string, rate float64, n int, call func(id string) error) []arrival {
	out := make([]arrival, n)
	atRate(rate, n, func(i int) {
		a := &out[i]
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: template})
		a.create = time.Since(t0)
		if err != nil {
			a.err = err
			return
		}
		defer func() { _ = c.DeleteSandbox(ctx, sb.ID) }()
		a.fromPool = sb.Status == "running"
		t1 := time.Now()
		if a.err = waitRunning(ctx, c, sb); a.err != nil {
			return
		}
		a.wait = time.Since(t1)
		t2 := time.Now()
		if a.err = call(sb.ID); a.err != nil {
			return
		}
		a.first = time.Since(t2)
		a.total = time.Since(t0)
		t3 := time.Now()
		a.err = call(sb.ID)
		a.second = time.Since(t3)
	})
	return out
}

// atRate calls f(0) … f(n-1), each in a goroutine of its own, the i-th
// i/rate seconds after the first (open loop: a call does not wait for the
// ones before it), and returns when all have returned.
func atRate(rate float64, n int, f func(i int)) {
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
		wg.Add(1)
		go func() { defer wg.Done(); f(i) }()
	}
	wg.Wait()
}

// steadyRows turns a steady-state run into a row; with breakdown, also
// the rows that say where the time went.
func steadyRows(name string, arrivals []arrival, breakdown bool) []*row {
	var total, create, wait, first, second []time.Duration
	errs, warm := 0, 0
	for _, a := range arrivals {
		if a.err != nil {
			errs++
			continue
		}
		if a.fromPool {
			warm++
		}
		total = append(total, a.total)
		create = append(create, a.create)
		wait = append(wait, a.wait)
		first = append(first, a.first)
		second = append(second, a.second)
	}
	rows := []*row{summarize(fmt.Sprintf("%s (%d/%d from the pool)", name, warm, len(arrivals)), total, errs)}
	if breakdown {
		rows = append(rows,
			summarize("  ├ of which the create call (HTTP, record, claim)", create, 0),
			summarize("  ├ of which waiting for running (0 when claimed)", wait, 0),
			summarize("  ├ of which the first command (agent round trip + sh start)", first, 0),
			summarize("  └ the same command again on the same sandbox", second, 0),
		)
	}
	return rows
}
