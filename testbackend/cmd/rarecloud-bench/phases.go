package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/backendproc"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/hostcpu"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// The phases of a bench run, in order; each adds its rows to the report.

// roundTrips measures the steady command and run_code round trips first:
// the warm rows are compared with them.
func (s *session) roundTrips() error {
	py, err := ready(s.ctx, s.wc, "python")
	if err != nil {
		return err
	}
	s.py = py
	s.add(repeat(s.o.n*5, func() error { return echo(s.ctx, s.wc, py) }, rowRoundTrip), floorExec)
	s.add(repeat(s.o.n, func() error { return runCode(s.ctx, s.wc, py, "python", "print('hi')") }, "run_code python round trip"), floorPython)
	return nil
}

// warmCreates measures warm creates in steady state: arrivals at a fixed
// rate with the default pool refilling on the same cores.
func (s *session) warmCreates() error {
	echoCall := func(id string) error { return echo(s.ctx, s.wc, id) }
	for _, st := range []struct {
		rate      float64
		n         int
		breakdown bool
	}{{1, s.o.n, true}, {0.5, s.o.n, true}, {5, s.o.n, false}, {2, s.o.n, false}, {10, s.o.n, false}} {
		if err := s.settle(); err != nil {
			return err
		}
		name := fmt.Sprintf("warm create → first command, %g creates/s, pool %d", st.rate, s.o.pool)
		arrivals, err := s.steadyCosted(st.rate, st.n, echoCall)
		if err != nil {
			return err
		}
		for i, r := range steadyRows(name, arrivals, st.breakdown) {
			ref := rowRoundTrip
			if i > 0 {
				ref = ""
			}
			s.add(r, ref)
			// The floor at the same rate: what any backend on this host pays.
			if f := s.floor[floorSteady]; i == 0 && st.rate == 1 && f != nil && f.P50 > 0 && f.P95 > 0 {
				s.rep.Notes = append(s.rep.Notes, fmt.Sprintf("warm create → first command at 1 create/s against the floor at the same rate (%s): %.2f× / %.2f× (p50 / p95)", floorSteady, r.P50/f.P50, r.P95/f.P95))
			}
		}
	}
	for _, lang := range []struct{ template, code, floor string }{
		{"python", "print('hi')", "run_code python round trip"},
		{"node", "console.log('hi')", floorNode},
	} {
		if err := s.settle(); err != nil {
			return err
		}
		first := func(id string) error { return runCode(s.ctx, s.wc, id, lang.template, lang.code) }
		s.add(steadyRows("warm create → first run_code "+lang.template+", 1 create/s", steady(s.ctx, s.wc, lang.template, 1, s.o.n/2, first), false)[0], lang.floor)
	}
	return nil
}

// steadyCosted runs a steady row and notes what it cost the host: CPU
// per sandbox over the row and the refills back to a full pool (the
// deletes' removals run meanwhile), how busy the host was during the
// row, and with -cpu-by-process (at 1 create/s) the same CPU by process.
func (s *session) steadyCosted(rate float64, n int, call func(id string) error) ([]arrival, error) {
	var prof *cpuProfile
	if s.o.cpuByProcess && rate == 1 {
		var err error
		if prof, err = startCPUProfile(s.work); err != nil {
			return nil, err
		}
	}
	b0, t0 := hostcpu.Busy(), time.Now()
	arrivals := steady(s.ctx, s.wc, "base", rate, n, call)
	busy, wall := hostcpu.Busy()-b0, time.Since(t0)
	settled := s.settle()
	total := hostcpu.Busy() - b0
	if prof != nil {
		// Accounting goes off before anything else, whatever happened.
		byProcess, err := prof.stop(n)
		if err != nil {
			return nil, err
		}
		s.rep.Costs[fmt.Sprintf("warm backend, %g creates/s: the same CPU by process (process accounting: the processes that ended, and dockerd and containerd)", rate)] = byProcess
	}
	if settled != nil {
		return nil, settled
	}
	s.rep.Costs[fmt.Sprintf("warm backend, %g creates/s: host CPU per sandbox (create, two commands, delete, its refill), and how busy the host was during the row", rate)] =
		warmCost(total, n, busy, wall, runtime.NumCPU())
	return arrivals, nil
}

// coldCreatesAndFiles measures creates without a pool and 1 MB file
// transfers.
func (s *session) coldCreatesAndFiles() error {
	s.add(createToRunning(s.ctx, s.cc, s.o.n/2, "create → running (pool empty)", "base", nil), floorStart)
	s.add(createToFirst(s.ctx, s.cc, s.o.n/2, "create → first command (pool empty)", "base", nil, func(id string) error { return echo(s.ctx, s.cc, id) }), floorStartExec)

	mb := strings.Repeat("x", sandbox.MaxFileChars) // the largest write the API takes, about 1 MB
	s.add(repeat(s.o.n, func() error { _, err := s.wc.WriteFile(s.ctx, s.py, "/home/user/1mb.txt", mb); return err }, "1 MB file write (1,000,000 characters)"), "")
	s.add(repeat(s.o.n, func() error {
		f, err := s.wc.ReadFile(s.ctx, s.py, "/home/user/1mb.txt")
		if err == nil && len(f.Content) != len(mb) {
			err = fmt.Errorf("read %d bytes", len(f.Content))
		}
		return err
	}, "1 MB file read"), "")
	return nil
}

// deletes measures delete → gone.
func (s *session) deletes() error {
	if err := s.settle(); err != nil {
		return err
	}
	s.add(deleteToGone(s.ctx, s.wc, s.o.n), floorRemove)
	return nil
}

// concurrency measures 20 concurrent creates and 500 commands over them,
// with the memory they take, beside the floor's idle containers.
func (s *session) concurrency() error {
	if err := s.settle(); err != nil {
		return err
	}
	memBefore := memAvailableKB()
	conc, ids := concurrentCreates(s.ctx, s.wc, 20)
	s.add(conc, floorConcStart)
	s.rep.Memory["backend RSS, 20 sandboxes"] = backendproc.RSS(s.warm.proc.Pid())
	if memBefore > 0 && len(ids) > 0 {
		if after := memAvailableKB(); after > 0 {
			s.rep.Memory["host memory per running sandbox (20 created at once, MemAvailable drop / 20)"] = fmt.Sprintf("%d kB", (memBefore-after)/int64(len(ids)))
		}
	}
	s.add(spread(500, 20, "500 commands over 20 sandboxes, 20 at once", func(i int) error { return echo(s.ctx, s.wc, ids[i%len(ids)]) }), floorConcExec)
	for _, id := range ids {
		_ = s.wc.DeleteSandbox(s.ctx, id)
	}
	_ = s.wc.DeleteSandbox(s.ctx, s.py)
	if kb, err := floorIdleMemory(s.ctx, s.rig, 20); err == nil {
		s.rep.Memory["floor: host memory per idle raw container (20, MemAvailable drop / 20)"] = fmt.Sprintf("%d kB", kb)
	}
	return nil
}

// terraform measures apply and destroy of 10 sandboxes, when asked.
func (s *session) terraform() error {
	if !s.o.terraform {
		return nil
	}
	if err := s.settle(); err != nil {
		return err
	}
	// A failed Terraform run is a note of the report, not the end of the bench.
	if apply, destroy, err := terraformRows(s.ctx, s.warm, s.work); err != nil {
		s.rep.Notes = append(s.rep.Notes, "terraform: "+err.Error())
	} else {
		s.add(apply, "")
		s.add(destroy, apply.Name)
	}
	return nil
}
