// Command rarecloud-bench measures the test backend side by side with the
// raw engine it runs on (`make bench`). It starts two backends as separate
// processes (one with a warm pool, one without), measures each operation,
// measures the floor (the same work done directly through the Docker API)
// in the same run, and prints a table with p50/p95/max and the ratio to
// the floor, plus a JSON file. Figures, not assertions: these machines are
// shared and noisy, so compare ratios from one run.
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
	flag.StringVar(&o.out, "out", "bench-results", "directory for results.json and the logs")
	flag.IntVar(&o.n, "n", 20, "samples per sequential row")
	flag.IntVar(&o.pool, "pool", 12, "warm containers per template in the warm backend")
	flag.BoolVar(&o.terraform, "terraform", true, "measure terraform apply/destroy of 10 sandboxes")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
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
	floor, err := measureFloor(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: waiting for the warm pool")
	if err := warm.waitPool(ctx, o.pool); err != nil {
		return err
	}
	rep.Memory["backend RSS, idle (warm pool full)"] = backendproc.RSS(warm.proc.Pid())

	wc, cc := warm.client(), cold.client()
	add := func(r *row, floorName string) {
		if f := floor[floorName]; f != nil && f.P50 > 0 {
			r.Floor = floorName
			r.Ratio = r.P50 / f.P50
		}
		rep.Rows = append(rep.Rows, r)
		fmt.Fprintf(os.Stderr, "bench: %-55s p50 %7.1f ms\n", r.Name, r.P50)
	}

	add(createToRunning(ctx, wc, o.n, "create → running (pool warm)", "base", warm), "floor: container create+start (runsc)")
	add(createToRunning(ctx, cc, o.n/2, "create → running (pool empty)", "base", nil), "floor: container create+start (runsc)")
	add(createToFirst(ctx, wc, o.n, "create → first commands result (pool warm)", "base", warm, func(id string) error { return echo(ctx, wc, id) }), "floor: create+start, then exec echo")
	add(createToFirst(ctx, cc, o.n/2, "create → first commands result (pool empty)", "base", nil, func(id string) error { return echo(ctx, cc, id) }), "floor: create+start, then exec echo")
	add(createToFirst(ctx, wc, o.n/2, "create → first run_code python (pool warm)", "python", warm, func(id string) error { return runCode(ctx, wc, id, "python", "print('hi')") }), "floor: exec python3 -c print")
	add(createToFirst(ctx, wc, o.n/2, "create → first run_code node (pool warm)", "node", warm, func(id string) error { return runCode(ctx, wc, id, "node", "console.log('hi')") }), "floor: exec node -e")

	py, err := ready(ctx, wc, "python")
	if err != nil {
		return err
	}
	add(repeat(o.n*5, func() error { return echo(ctx, wc, py) }, "commands round trip (echo hi)"), "floor: exec echo hi")
	add(repeat(o.n, func() error { return runCode(ctx, wc, py, "python", "print('hi')") }, "run_code python round trip"), "floor: exec python3 -c print")
	mb := strings.Repeat("x", sandbox.MaxFileChars) // the largest write the API takes, about 1 MB
	add(repeat(o.n, func() error { _, err := wc.WriteFile(ctx, py, "/home/user/1mb.txt", mb); return err }, "1 MB file write (1,000,000 characters)"), "")
	add(repeat(o.n, func() error {
		f, err := wc.ReadFile(ctx, py, "/home/user/1mb.txt")
		if err == nil && len(f.Content) != len(mb) {
			err = fmt.Errorf("read %d bytes", len(f.Content))
		}
		return err
	}, "1 MB file read"), "")
	add(deleteToGone(ctx, wc, o.n), "floor: container remove")

	if err := warm.waitPool(ctx, o.pool); err != nil {
		return err
	}
	conc, ids := concurrentCreates(ctx, wc, 20)
	add(conc, "floor: container create+start (runsc)")
	rep.Memory["backend RSS, 20 sandboxes"] = backendproc.RSS(warm.proc.Pid())
	add(spreadCommands(ctx, wc, ids, 500, 20), "floor: exec echo hi")
	for _, id := range ids {
		_ = wc.DeleteSandbox(ctx, id)
	}
	_ = wc.DeleteSandbox(ctx, py)

	if o.terraform {
		if err := warm.waitPool(ctx, o.pool); err != nil {
			return err
		}
		apply, destroy, err := terraformRows(ctx, warm, work)
		if err != nil {
			rep.Notes = append(rep.Notes, "terraform: "+err.Error())
		} else {
			add(apply, "")
			add(destroy, "")
		}
	}
	for _, name := range floorOrder {
		if f := floor[name]; f != nil {
			rep.Rows = append(rep.Rows, f)
		}
	}
	rep.Notes = append(rep.Notes,
		fmt.Sprintf("warm backend: pool of %d per template; cold backend: no pool; both separate processes on loopback", o.pool),
		"floor: the same operations through the Docker Engine API directly, runsc, in this run",
		"create → first result: create, then GET ?waitFor=running (answered when the container runs), then the call")
	return writeReport(rep, o.out)
}
