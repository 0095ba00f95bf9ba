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
)

const token = "rc_pat_bench"

type options struct {
	out       string
	n         int
	pool      int
	terraform bool
	// cpuByProcess: account the 1/s warm row's CPU process by process.
	cpuByProcess bool
	soak         bool
	so           soakOptions
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "bench-results", "directory for results.json, results.md, latency.png and the logs")
	flag.IntVar(&o.n, "n", 20, "samples per row")
	flag.IntVar(&o.pool, "pool", 2, "warm containers per template in the warm backend (2 is the backend's default)")
	flag.BoolVar(&o.terraform, "terraform", true, "measure terraform apply/destroy of 10 sandboxes")
	flag.BoolVar(&o.cpuByProcess, "cpu-by-process", false, "say where the 1 create/s warm row's CPU goes, process by process (BSD process accounting: needs root and accton from Debian's acct package)")
	flag.BoolVar(&o.soak, "soak", false, "run the soak instead: many sandboxes, many clients, beside the floor (soak.md, soak.json)")
	flag.IntVar(&o.so.sandboxes, "soak-sandboxes", 50, "soak: sandboxes (and raw containers for the floor)")
	flag.IntVar(&o.so.commands, "soak-commands", 2000, "soak: commands")
	flag.IntVar(&o.so.clients, "soak-clients", 40, "soak: concurrent clients (and concurrent execs for the floor)")
	flag.IntVar(&o.so.maxInFlight, "soak-max-in-flight", 20, "soak: the backend's --max-in-flight (past it requests queue, then 429)")
	flag.StringVar(&o.so.only, "soak-only", "", "soak: run one phase only, load (many sandboxes beside the floor) or hostile (the hostile neighbour); both when empty")
	flag.IntVar(&o.so.hostile.ops, "hostile-ops", 1000, "soak, hostile neighbour: the well-behaved account's commands per run (quiet, beside the attacks, quiet again), split over the rounds")
	flag.IntVar(&o.so.hostile.rounds, "hostile-rounds", 4, "soak, hostile neighbour: rounds of a quiet run then a run beside the attacks; each condition's rounds are pooled, so the ratio compares runs of the same minutes")
	flag.IntVar(&o.so.hostile.concurrency, "hostile-concurrency", 2, "soak, hostile neighbour: goroutines per looping attack")
	flag.StringVar(&o.so.hostile.attacks, "hostile-attacks", "all", "soak, hostile neighbour: the attacks, all or some of long,device,burst,dns,read,jobs (comma-separated), to see what each costs")
	// The target is 1.5; on the 2-core machine of the results it
	// is met at the median but not in every run, so the default is a
	// regression bound above that (results/README.md#hostile-neighbour
	// has the runs).
	flag.Float64Var(&o.so.hostile.maxP99Ratio, "hostile-max-p99-ratio", 5, "soak, hostile neighbour: fail when the well-behaved account's p99 beside the attacks exceeds its quiet p99 by more than this factor (issue 27's target: 1.5; the default is a regression bound above what 2 cores measure, results/README.md#hostile-neighbour)")
	flag.StringVar(&o.so.hostile.clients, "hostile-clients", clientsNiced, "soak, hostile neighbour: where the attacks' clients run: niced (a process of their own at nice 19, standing for the other machines they are on), process (the same at the host's priority) or inline (goroutines of the bench's process, beside the well-behaved account's client)")
	attackChild := flag.Bool(attackChildFlag, false, "internal: be the hostile neighbour's attacks' process (plan on stdin)")
	flag.Parse()
	if *attackChild {
		if err := runAttackChild(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench: attacks: ", err)
			os.Exit(1)
		}
		return
	}
	if o.so.hostile.clients != clientsNiced && o.so.hostile.clients != clientsProcess && o.so.hostile.clients != clientsInline {
		fmt.Fprintf(os.Stderr, "bench: -hostile-clients %q: want %s, %s or %s\n", o.so.hostile.clients, clientsNiced, clientsProcess, clientsInline)
		os.Exit(2)
	}
	if o.so.hostile.rounds < 1 || o.so.hostile.ops < o.so.hostile.rounds {
		fmt.Fprintf(os.Stderr, "bench: -hostile-rounds %d: want at least 1 and at most -hostile-ops (%d)\n", o.so.hostile.rounds, o.so.hostile.ops)
		os.Exit(2)
	}
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
	if o.soak {
		return runSoak(o, o.so, work)
	}
	s, err := startSession(context.Background(), o, work)
	if err != nil {
		return err
	}
	defer s.close()
	for _, phase := range []func() error{s.roundTrips, s.warmCreates, s.coldCreatesAndFiles, s.deletes, s.concurrency, s.terraform} {
		if err := phase(); err != nil {
			return err
		}
	}
	return s.finish()
}

// rowRoundTrip is the command round trip the warm rows are compared with.
const rowRoundTrip = "commands round trip (echo hi)"
