// Command rarecloud-bench measures the test backend side by side with the
// raw engine it runs on (`make bench`). It starts two backends as separate
// processes (one with the default warm pool, one without), measures each
// operation through the API, measures the floor (the same work, the same
// argv, the same concurrency, directly through the Docker Engine API) in
// the same run, and prints a table with p50/p95/max and the ratios to the
// floor, plus a JSON file and a chart. Figures, not assertions: these
// machines are shared and noisy, so compare ratios from one run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/backendproc"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

const token = "rc_pat_bench"

type options struct {
	out       string
	n         int
	pool      int
	terraform bool
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "bench-results", "directory for results.json, results.md, latency.png and the logs")
	flag.IntVar(&o.n, "n", 20, "samples per row")
	flag.IntVar(&o.pool, "pool", 2, "warm containers per template in the warm backend (2 is the backend's default)")
	flag.BoolVar(&o.terraform, "terraform", true, "measure terraform apply/destroy of 10 sandboxes")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench: ", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "rarecloud-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	ctx := context.Background()

	fmt.Fprintln(os.Stderr, "bench: building the backend")
	bin := filepath.Join(work, "rarecloud-testbackend")
	if err := backendproc.Build(ctx, bin); err != nil {
		return err
	}
	tokens := filepath.Join(work, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"tokens":[{"token":"`+token+`","account":"bench","scopes":["services:read","services:write"]}]}`), 0o600); err != nil {
		return err
	}
	warm, err := startBackend(bin, tokens, filepath.Join(work, "warm"), o.pool, o.out)
	if err != nil {
		return err
	}
	defer warm.stop()
	cold, err := startBackend(bin, tokens, filepath.Join(work, "cold"), 0, o.out)
	if err != nil {
		return err
	}
	defer cold.stop()

	rep := &report{Date: time.Now().UTC().Format(time.RFC3339), Memory: map[string]string{}}
	rep.Machine = machine()

	fmt.Fprintln(os.Stderr, "bench: floor (Docker API directly)")
	rig, err := newFloorRig()
	if err != nil {
		return err
	}
	defer rig.d.Close()
	floor, err := measureFloor(ctx, o, rig)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: waiting for the warm pool")
	if err := warm.waitPool(ctx, o.pool); err != nil {
		return err
	}
	rep.Memory["backend RSS, idle (warm pool full)"] = backendproc.RSS(warm.proc.Pid())

	wc, cc := warm.client(), cold.client()
	byName := map[string]*row{}
	for k, v := range floor {
		byName[k] = v
	}
	// add records a row with its ratios to ref (a floor row or another
	// row of this run).
	add := func(r *row, ref string) {
		if f := byName[ref]; f != nil && f.P50 > 0 && f.P95 > 0 {
			r.Floor = ref
			r.Ratio = r.P50 / f.P50
			r.RatioP95 = r.P95 / f.P95
		}
		byName[r.Name] = r
		rep.Rows = append(rep.Rows, r)
		fmt.Fprintf(os.Stderr, "bench: %-60s p50 %7.1f ms  p95 %7.1f ms\n", r.Name, r.P50, r.P95)
	}
	settle := func() error { return warm.waitPool(ctx, o.pool) }

	// The steady round trip first: the warm rows are compared with it.
	py, err := ready(ctx, wc, "python")
	if err != nil {
		return err
	}
	add(repeat(o.n*5, func() error { return echo(ctx, wc, py) }, rowRoundTrip), floorExec)
	add(repeat(o.n, func() error { return runCode(ctx, wc, py, "python", "print('hi')") }, "run_code python round trip"), floorPython)

	// Warm creates in steady state: arrivals at a fixed rate with the
	// default pool refilling on the same cores.
	echoCall := func(id string) error { return echo(ctx, wc, id) }
	for _, s := range []struct {
		rate      float64
		n         int
		breakdown bool
	}{{1, o.n, true}, {5, o.n, false}, {2, o.n, false}, {10, o.n, false}} {
		if err := settle(); err != nil {
			return err
		}
		name := fmt.Sprintf("warm create → first command, %g creates/s, pool %d", s.rate, o.pool)
		for i, r := range steadyRows(name, steady(ctx, wc, "base", s.rate, s.n, echoCall), s.breakdown) {
			ref := rowRoundTrip
			if i > 0 {
				ref = ""
			}
			add(r, ref)
		}
	}
	if err := settle(); err != nil {
		return err
	}
	add(steadyRows("warm create → first run_code python, 1 create/s", steady(ctx, wc, "python", 1, o.n/2, func(id string) error { return runCode(ctx, wc, id, "python", "print('hi')") }), false)[0], "run_code python round trip")
	if err := settle(); err != nil {
		return err
	}
	add(steadyRows("warm create → first run_code node, 1 create/s", steady(ctx, wc, "node", 1, o.n/2, func(id string) error { return runCode(ctx, wc, id, "node", "console.log('hi')") }), false)[0], floorNode)

	add(createToRunning(ctx, cc, o.n/2, "create → running (pool empty)", "base", nil), floorStart)
	add(createToFirst(ctx, cc, o.n/2, "create → first command (pool empty)", "base", nil, func(id string) error { return echo(ctx, cc, id) }), floorStartExec)

	mb := strings.Repeat("x", sandbox.MaxFileChars) // the largest write the API takes, about 1 MB
	add(repeat(o.n, func() error { _, err := wc.WriteFile(ctx, py, "/home/user/1mb.txt", mb); return err }, "1 MB file write (1,000,000 characters)"), "")
	add(repeat(o.n, func() error {
		f, err := wc.ReadFile(ctx, py, "/home/user/1mb.txt")
		if err == nil && len(f.Content) != len(mb) {
			err = fmt.Errorf("read %d bytes", len(f.Content))
		}
		return err
	}, "1 MB file read"), "")
	if err := settle(); err != nil {
		return err
	}
	add(deleteToGone(ctx, wc, o.n), floorRemove)

	if err := settle(); err != nil {
		return err
	}
	memBefore := memAvailableKB()
	conc, ids := concurrentCreates(ctx, wc, 20)
	add(conc, floorConcStart)
	rep.Memory["backend RSS, 20 sandboxes"] = backendproc.RSS(warm.proc.Pid())
	if memBefore > 0 && len(ids) > 0 {
		if after := memAvailableKB(); after > 0 {
			rep.Memory["host memory per running sandbox (20 created at once, MemAvailable drop / 20)"] = fmt.Sprintf("%d kB", (memBefore-after)/int64(len(ids)))
		}
	}
	add(spread(500, 20, "500 commands over 20 sandboxes, 20 at once", func(i int) error { return echo(ctx, wc, ids[i%len(ids)]) }), floorConcExec)
	for _, id := range ids {
		_ = wc.DeleteSandbox(ctx, id)
	}
	_ = wc.DeleteSandbox(ctx, py)
	if kb, err := floorIdleMemory(ctx, rig, 20); err == nil {
		rep.Memory["floor: host memory per idle raw container (20, MemAvailable drop / 20)"] = fmt.Sprintf("%d kB", kb)
	}

	if o.terraform {
		if err := settle(); err != nil {
			return err
		}
		apply, destroy, err := terraformRows(ctx, warm, work)
		if err != nil {
			rep.Notes = append(rep.Notes, "terraform: "+err.Error())
		} else {
			add(apply, "")
			add(destroy, apply.Name)
		}
	}
	for _, name := range floorOrder {
		if f := floor[name]; f != nil {
			rep.Rows = append(rep.Rows, f)
		}
	}
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("warm backend: pool of %d per template (the default), refilling while the rows run; cold backend: no pool; both separate processes on loopback", o.pool),
		"floor: the same operations through the Docker Engine API directly, runsc, the argv the API runs (sh -c for commands, the interpreter reading stdin for run_code), no wrapper, the same concurrency",
		"warm rows: creates arrive at a fixed rate (open loop); each creates, waits for running (GET ?waitFor=running), runs the first command, runs it again, deletes",
		"ratios: p50 and p95 against the row named (a floor row, or another row of this run)")
	if err := writeReport(rep, o.out); err != nil {
		return err
	}
	return writeChart(rep, filepath.Join(o.out, "latency.png"))
}

// rowRoundTrip is the command round trip the warm rows are compared with.
const rowRoundTrip = "commands round trip (echo hi)"
