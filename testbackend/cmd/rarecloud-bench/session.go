package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/backendproc"
)

// session is one bench run: the two backends, the floor measured first,
// and the report its phases (phases.go) add rows to.
type session struct {
	ctx        context.Context
	o          options
	work       string
	warm, cold *backend
	wc, cc     *client.Client
	rig        *floorRig
	floor      map[string]*row
	rep        *report
	byName     map[string]*row
	py         string // a running python sandbox of the warm backend
}

// startSession builds and starts the backends, waits for the warm pool,
// then measures the floor.
func startSession(ctx context.Context, o options, work string) (*session, error) {
	s := &session{ctx: ctx, o: o, work: work, byName: map[string]*row{},
		rep: &report{Date: time.Now().UTC().Format(time.RFC3339), Memory: map[string]string{}, Costs: map[string]string{}, Machine: machine()}}
	bin, tokens, err := prepareBackend(ctx, work)
	if err != nil {
		return nil, err
	}
	if s.warm, err = startBackend(bin, tokens, filepath.Join(work, "warm"), o.pool, o.out); err != nil {
		return nil, err
	}
	if s.cold, err = startBackend(bin, tokens, filepath.Join(work, "cold"), 0, o.out); err != nil {
		s.close()
		return nil, err
	}
	// The floor is measured on a quiet host: after the warm pool has
	// filled (its starts would otherwise share the cores with the floor's
	// and inflate its times and CPU costs), with the idle pool beside it as
	// the warm rows have.
	fmt.Fprintln(os.Stderr, "bench: waiting for the warm pool")
	if err := s.settle(); err != nil {
		s.close()
		return nil, err
	}
	s.rep.Memory["backend RSS, idle (warm pool full)"] = backendproc.RSS(s.warm.proc.Pid())
	fmt.Fprintln(os.Stderr, "bench: floor (Docker API directly)")
	if s.rig, err = newFloorRig(); err != nil {
		s.close()
		return nil, err
	}
	if s.floor, err = measureFloor(ctx, o, s.rig, s.rep.Costs); err != nil {
		s.close()
		return nil, err
	}
	for k, v := range s.floor {
		s.byName[k] = v
	}
	s.wc, s.cc = s.warm.client(), s.cold.client()
	return s, nil
}

// prepareBackend builds the backend binary and writes the bench's tokens file.
func prepareBackend(ctx context.Context, work string) (bin, tokens string, err error) {
	fmt.Fprintln(os.Stderr, "bench: building the backend")
	bin = filepath.Join(work, "rarecloud-testbackend")
	if err := backendproc.Build(ctx, bin); err != nil {
		return "", "", err
	}
	tokens = filepath.Join(work, "tokens.json")
	// The soak's hostile neighbour (hostile.go) is a second account.
	err = os.WriteFile(tokens, []byte(`{"tokens":[{"token":"`+token+`","account":"bench","scopes":["services:read","services:write"]},`+
		`{"token":"`+hostileToken+`","account":"hostile","scopes":["services:read","services:write"]}]}`), 0o600)
	return bin, tokens, err
}

func (s *session) close() {
	if s.rig != nil {
		s.rig.d.Close()
		s.rig.eng.Close()
	}
	if s.cold != nil {
		s.cold.stop()
	}
	if s.warm != nil {
		s.warm.stop()
	}
}

// add records a row with its ratios to ref (a floor row or another row
// of this run).
func (s *session) add(r *row, ref string) {
	if f := s.byName[ref]; f != nil && f.P50 > 0 && f.P95 > 0 {
		r.Floor = ref
		r.Ratio = r.P50 / f.P50
		r.RatioP95 = r.P95 / f.P95
	}
	s.byName[r.Name] = r
	s.rep.Rows = append(s.rep.Rows, r)
	fmt.Fprintf(os.Stderr, "bench: %-60s p50 %7.1f ms  p95 %7.1f ms\n", r.Name, r.P50, r.P95)
}

// settle waits until the warm pool is full again.
func (s *session) settle() error { return s.warm.waitPool(s.ctx, s.o.pool) }

// finish adds the floor rows and the notes, and writes the report and
// the chart.
func (s *session) finish() error {
	for _, name := range floorOrder {
		if f := s.floor[name]; f != nil {
			s.rep.Rows = append(s.rep.Rows, f)
		}
	}
	s.rep.Notes = append(s.rep.Notes,
		fmt.Sprintf("warm backend: pool of %d per template (the default), refilling while the rows run; cold backend: no pool; both separate processes on loopback", s.o.pool),
		"floor: the same operations through the Docker Engine API directly, runsc, the argv the API runs (sh -c for commands, the interpreter reading stdin for run_code), no wrapper, the same concurrency",
		"warm rows: creates arrive at a fixed rate (open loop); each creates, waits for running (GET ?waitFor=running), runs the first command, runs it again, deletes",
		"ratios: p50 and p95 against the row named (a floor row, or another row of this run)")
	if err := writeReport(s.rep, s.o.out); err != nil {
		return err
	}
	return writeChart(s.rep, filepath.Join(s.o.out, "latency.png"))
}
