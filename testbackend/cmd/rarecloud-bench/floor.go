package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// The floor rows: the same work done through the Docker Engine API alone,
// with the argv the API itself runs (sh -c for commands, the interpreter
// reading code on stdin for run_code) and no wrapper around it.
const (
	floorStart     = "floor: container create+start (runsc)"
	floorExec      = "floor: exec sh -c 'echo hi'"
	floorStartExec = "floor: create+start, then exec sh -c 'echo hi'"
	floorPython    = "floor: exec python3 - (code on stdin)"
	floorNode      = "floor: exec node - (code on stdin)"
	floorRemove    = "floor: container remove"
	floorConcStart = "floor: 20 container create+start at once"
	floorConcExec  = "floor: 500 execs over 20 containers, 20 at once"
	floorSteady    = "floor: 1 raw start/s → first exec (each: start, exec, exec, remove)"
)

var floorOrder = []string{floorStart, floorExec, floorStartExec, floorPython, floorNode, floorRemove, floorConcStart, floorConcExec, floorSteady}

// echoArgv is what the API runs for the command "echo hi".
var echoArgv = []string{"sh", "-c", "echo hi"}

// floorRig is a runtime with no agent and no backend in front of it, on the
// same network and with the same limits as a sandbox of the base template.
type floorRig struct {
	d *docker.Runtime
	// eng starts the same containers with the engine's own networking
	// (libnetwork), for the cost of what the backend's wiring replaced.
	eng *docker.Runtime
	n   atomic.Int64
}

func newFloorRig() (*floorRig, error) {
	opts := docker.Options{Instance: fmt.Sprintf("bench-floor-%d", os.Getpid()), PullPolicy: "never", Agent: docker.AgentNone}
	d, err := docker.New(opts)
	if err != nil {
		return nil, err
	}
	opts.Instance += "-engnet"
	opts.EngineNetworking = true
	eng, err := docker.New(opts)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return &floorRig{d: d, eng: eng}, nil
}

func (f *floorRig) spec(image string) container.Spec {
	name := "rarecloud-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.FormatInt(f.n.Add(1), 10)
	return container.Spec{Name: name, Image: image, NanoCPUs: 1e9, MemoryBytes: 1 << 30, HomeBytes: 2 << 30, TmpBytes: 1 << 30, MaxProcs: 512}
}

func (f *floorRig) exec(ctx context.Context, id string, argv []string, stdin string) error {
	req := container.ExecRequest{Cmd: argv, MaxOutput: 1 << 20}
	if stdin != "" {
		req.Stdin = strings.NewReader(stdin)
	}
	res, err := f.d.Exec(ctx, id, req)
	if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
		err = fmt.Errorf("exit %v: %s", res.ExitCode, res.Stderr)
	}
	return err
}

// measureFloor measures every floor row, and what a raw start, exec and
// remove cost in host CPU (into costs).
func measureFloor(ctx context.Context, o options, f *floorRig, costs map[string]string) (map[string]*row, error) {
	d := f.d
	out := map[string]*row{}
	var starts, removes, firsts []time.Duration
	var startCPU, execCPU, removeCPU, engStartCPU, engRemoveCPU cpuCost
	errs := 0
	for i := 0; i < o.n/2; i++ {
		// The same start and remove with the engine's networking,
		// alternating with the rows' own so that both see the same host.
		var engID string
		if err := engStartCPU.measure(func() (err error) { engID, err = f.eng.Start(ctx, f.spec(sandbox.ImageBase)); return err }); err == nil {
			_ = engRemoveCPU.measure(func() error { return f.eng.Remove(ctx, engID) })
		}

		t0 := time.Now()
		var id string
		if err := startCPU.measure(func() (err error) { id, err = d.Start(ctx, f.spec(sandbox.ImageBase)); return err }); err != nil {
			errs++
			continue
		}
		starts = append(starts, time.Since(t0))
		if err := execCPU.measure(func() error { return f.exec(ctx, id, echoArgv, "") }); err != nil {
			errs++
		}
		firsts = append(firsts, time.Since(t0))
		t1 := time.Now()
		_ = removeCPU.measure(func() error { return d.Remove(ctx, id) })
		removes = append(removes, time.Since(t1))
	}
	costs["floor: host CPU per raw start (busy CPU time from /proc/stat, one at a time)"] = startCPU.String()
	costs["floor: host CPU per raw exec sh -c 'echo hi' (the first in a new container)"] = execCPU.String()
	costs["floor: host CPU per raw remove"] = removeCPU.String()
	costs["floor: host CPU per raw start with the engine's networking (libnetwork; the backend wires sandboxes itself)"] = engStartCPU.String()
	costs["floor: host CPU per raw remove with the engine's networking"] = engRemoveCPU.String()
	costs["floor: CPU needed for 1 sandbox/s"] = capacityNote(startCPU.per(), execCPU.per(), removeCPU.per(), 1, runtime.NumCPU())
	out[floorStart] = summarize(floorStart, starts, errs)
	out[floorStartExec] = summarize(floorStartExec, firsts, errs)
	out[floorRemove] = summarize(floorRemove, removes, 0)
	for _, c := range []struct {
		image, name string
		argv        []string
		stdin       string
		n           int
	}{
		{sandbox.ImageBase, floorExec, echoArgv, "", o.n * 5},
		{sandbox.ImagePython, floorPython, []string{"python3", "-"}, "print('hi')", o.n},
		{sandbox.ImageNode, floorNode, []string{"node", "-"}, "console.log('hi')", o.n / 2},
	} {
		id, err := d.Start(ctx, f.spec(c.image))
		if err != nil {
			return nil, err
		}
		out[c.name] = repeat(c.n, func() error { return f.exec(ctx, id, c.argv, c.stdin) }, c.name)
		_ = d.Remove(ctx, id)
	}

	f.measureConcurrency(ctx, out)
	out[floorSteady] = f.steady(ctx, 1, o.n)
	return out, nil
}

// steady is the floor of the warm rows: raw starts arriving at a fixed
// rate (open loop), each started, exec'd twice and removed, as a warm
// row's sandboxes are. It shows whether this host keeps up with the rate
// at all, pool or no pool: a start a sandbox is the least any backend
// pays.
func (f *floorRig) steady(ctx context.Context, rate float64, n int) *row {
	samples := make([]time.Duration, n)
	failed := make([]bool, n)
	atRate(rate, n, func(i int) {
		t0 := time.Now()
		id, err := f.d.Start(ctx, f.spec(sandbox.ImageBase))
		if err != nil {
			failed[i] = true
			return
		}
		defer func() { _ = f.d.Remove(ctx, id) }()
		if err := f.exec(ctx, id, echoArgv, ""); err != nil {
			failed[i] = true
			return
		}
		samples[i] = time.Since(t0)
		failed[i] = f.exec(ctx, id, echoArgv, "") != nil
	})
	var ok []time.Duration
	errs := 0
	for i, s := range samples {
		if failed[i] {
			errs++
			continue
		}
		ok = append(ok, s)
	}
	return summarize(floorSteady, ok, errs)
}

// measureConcurrency measures the floor's concurrency rows: 20 raw starts
// at once, the same 20 the API rows use, then 500 execs over them, 20 at
// once.
func (f *floorRig) measureConcurrency(ctx context.Context, out map[string]*row) {
	d := f.d
	ids := make([]string, 20)
	var mu sync.Mutex
	var samples []time.Duration
	errs := 0
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			id, err := d.Start(ctx, f.spec(sandbox.ImageBase))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				return
			}
			ids[i] = id
			samples = append(samples, time.Since(t0))
		}()
	}
	wg.Wait()
	out[floorConcStart] = summarize(floorConcStart, samples, errs)
	live := ids[:0]
	for _, id := range ids {
		if id != "" {
			live = append(live, id)
		}
	}
	if len(live) > 0 {
		out[floorConcExec] = spread(500, 20, floorConcExec, func(i int) error { return f.exec(ctx, live[i%len(live)], echoArgv, "") })
	}
	for _, id := range live {
		wg.Add(1)
		go func() { defer wg.Done(); _ = d.Remove(ctx, id) }()
	}
	wg.Wait()
}
