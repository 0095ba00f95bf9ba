package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/backendproc"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// The soak (`make soak`): many sandboxes under many clients, beside the
// floor doing the same commands over as many raw containers at the same
// concurrency, in the same run. Its clients speak plain HTTP so that every
// 429 is counted; each honours Retry-After, as a client must.

type soakOptions struct {
	sandboxes, commands, clients, maxInFlight int
	// only runs one phase: "load" (the many sandboxes beside the floor)
	// or "hostile" (the hostile neighbour, hostile.go); "" runs both.
	only    string
	hostile hostileOptions
}

// soakResult is what a soak run reports besides its rows.
type soakResult struct {
	Answers, Throttled, Errors, Leaked int
	Running                            time.Duration // until every sandbox ran
	API, Floor                         time.Duration // wall time of the commands
}

func runSoak(o options, so soakOptions, work string) error {
	ctx := context.Background()
	if so.only != "" && so.only != "load" && so.only != "hostile" {
		return fmt.Errorf("-soak-only %q: want load or hostile", so.only)
	}
	rep := &report{Date: time.Now().UTC().Format(time.RFC3339), Memory: map[string]string{}, Machine: machine()}
	bin, tokens, err := prepareBackend(ctx, work)
	if err != nil {
		return err
	}
	rig, err := newFloorRig()
	if err != nil {
		return err
	}
	defer rig.d.Close()
	var problems []string
	if so.only != "hostile" {
		p, err := soakLoad(ctx, o, so, bin, tokens, work, rig, rep)
		if err != nil {
			return err
		}
		problems = append(problems, p...)
	}
	if so.only != "load" {
		p, err := soakHostile(ctx, o, so, bin, tokens, work, rig, rep)
		if err != nil {
			return err
		}
		problems = append(problems, p...)
	}
	if err := writeReportAs(rep, o.out, "soak"); err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("soak: %s", strings.Join(problems, "; "))
	}
	return nil
}

// soakLoad is the load phase: many sandboxes under many clients beside
// the floor. It adds its rows and notes to the report and returns its
// failures.
func soakLoad(ctx context.Context, o options, so soakOptions, bin, tokens, work string, rig *floorRig, rep *report) ([]string, error) {
	fmt.Fprintf(os.Stderr, "soak: floor: %d raw containers, %d execs, %d at once\n", so.sandboxes, so.commands, so.clients)
	floorRow, floorWall, floorMem, err := soakFloor(ctx, rig, so)
	if err != nil {
		return nil, err
	}
	rep.Memory[fmt.Sprintf("floor: host memory per idle raw container (%d, MemAvailable drop / %d)", so.sandboxes, so.sandboxes)] = fmt.Sprintf("%d kB", floorMem)

	data := filepath.Join(work, "soak")
	b, err := startBackend(bin, tokens, data, o.pool, o.out, "--max-in-flight", strconv.Itoa(so.maxInFlight))
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			b.stop()
		}
	}()
	if err := b.waitPool(ctx, o.pool); err != nil {
		return nil, err
	}
	h := &soakClient{base: b.url, token: token}
	res := soakResult{Floor: floorWall}
	memBefore := memAvailableKB()
	start := time.Now()
	ids, err := h.createAll(ctx, so.sandboxes)
	deleted := false
	defer func() {
		if !deleted { // an error below: what was made goes all the same
			h.deleteAll(ctx, ids)
		}
	}()
	if err != nil {
		return nil, err
	}
	res.Running = time.Since(start)
	fmt.Fprintf(os.Stderr, "soak: %d sandboxes running after %v\n", len(ids), res.Running.Round(time.Millisecond))
	rep.Memory[fmt.Sprintf("backend RSS, %d sandboxes running", so.sandboxes)] = backendproc.RSS(b.proc.Pid())
	if after := memAvailableKB(); memBefore > 0 && after > 0 {
		rep.Memory[fmt.Sprintf("host memory per running sandbox (%d, MemAvailable drop / %d: backend share and the runtime's processes)", so.sandboxes, so.sandboxes)] = fmt.Sprintf("%d kB", (memBefore-after)/int64(len(ids)))
	}

	t0 := time.Now()
	apiRow := spread(so.commands, so.clients, fmt.Sprintf("soak: %d commands over %d sandboxes, %d clients", so.commands, so.sandboxes, so.clients),
		func(i int) error { return h.command(ctx, ids[i%len(ids)], i) })
	res.API = time.Since(t0)
	floorRow.Name = fmt.Sprintf("floor: %d execs over %d containers, %d at once", so.commands, so.sandboxes, so.clients)
	apiRow.Floor, apiRow.Ratio, apiRow.RatioP95 = floorRow.Name, apiRow.P50/floorRow.P50, apiRow.P95/floorRow.P95
	rep.Rows = append(rep.Rows, apiRow, floorRow)

	h.deleteAll(ctx, ids)
	deleted = true
	b.stop() // waits for the background removals, then drains the pool
	stopped = true
	res.Leaked = leftContainers(ctx, rig, instance.ID(data))
	res.Answers, res.Throttled, res.Errors = int(h.answers.Load()), int(h.throttled.Load()), int(h.errors.Load())+apiRow.Errors

	rep.Notes = append(rep.Notes, soakNotes(so, o.pool, res, apiRow)...)
	if res.Errors > 0 || res.Leaked > 0 {
		return []string{fmt.Sprintf("%d errors, %d containers left", res.Errors, res.Leaked)}, nil
	}
	return nil, nil
}

// soakNotes are the soak's figures against its targets (issue: at most
// 1% of answers 429, p99 at most 3× p50, throughput at least the floor's).
func soakNotes(so soakOptions, pool int, res soakResult, api *row) []string {
	if len(api.Samples) == 0 {
		return []string{fmt.Sprintf("no command succeeded (%d errors)", res.Errors)}
	}
	p99 := pct(api.Samples, 0.99)
	return []string{
		fmt.Sprintf("%d sandboxes running after %.1f s", so.sandboxes, res.Running.Seconds()),
		fmt.Sprintf("answers: %d, of which 429: %d (%.2f%%; target ≤ 1%%)", res.Answers, res.Throttled, 100*float64(res.Throttled)/float64(max(res.Answers, 1))),
		fmt.Sprintf("commands: p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms; p99 / p50 = %.2f (target ≤ 3)", api.P50, api.P95, p99, api.Max, p99/api.P50),
		fmt.Sprintf("throughput: %.1f commands/s against the floor's %.1f execs/s: %.2f× (target ≥ 1.0)",
			float64(so.commands)/res.API.Seconds(), float64(so.commands)/res.Floor.Seconds(), res.Floor.Seconds()/res.API.Seconds()),
		fmt.Sprintf("errors: %d; containers left after deleting every sandbox and stopping the backend: %d", res.Errors, res.Leaked),
		fmt.Sprintf("backend: --max-in-flight %d (past it a request queues while its line moves: 429 after 2 s without a request finishing, or 30 s in all), warm pool of %d per template; a separate process on loopback", so.maxInFlight, pool),
	}
}

// soakFloor starts n raw containers, runs the commands over them at the
// same concurrency, and removes them: the row, its wall time and the host
// memory per idle container.
func soakFloor(ctx context.Context, rig *floorRig, so soakOptions) (*row, time.Duration, int64, error) {
	before := memAvailableKB()
	ids := make([]string, so.sandboxes)
	errs := make([]error, so.sandboxes)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ids[i], errs[i] = rig.d.Start(ctx, rig.spec(sandbox.ImageBase))
		}()
	}
	wg.Wait()
	defer func() {
		for _, id := range ids {
			if id != "" {
				wg.Add(1)
				go func() { defer wg.Done(); _ = rig.d.Remove(ctx, id) }()
			}
		}
		wg.Wait()
	}()
	for _, err := range errs {
		if err != nil {
			return nil, 0, 0, err
		}
	}
	time.Sleep(2 * time.Second)
	mem := (before - memAvailableKB()) / int64(so.sandboxes)
	t0 := time.Now()
	r := spread(so.commands, so.clients, "floor", func(i int) error {
		return rig.exec(ctx, ids[i%len(ids)], []string{"sh", "-c", "echo " + strconv.Itoa(i)}, "")
	})
	return r, time.Since(t0), mem, nil
}

// leftContainers counts the engine's containers of a backend instance.
func leftContainers(ctx context.Context, rig *floorRig, instance string) int {
	others, err := rig.d.OtherInstances(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak: listing containers:", err)
		return -1
	}
	return len(others[instance])
}

// soakClient is a plain HTTP client of the API that counts its answers.
type soakClient struct {
	base, token                string
	answers, throttled, errors atomic.Int64
}

// do sends a request until it is not a 429, honouring Retry-After, and
// returns the status and body of the last answer.
func (c *soakClient) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, nil, err
		}
	}
	for {
		req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(payload))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			c.errors.Add(1)
			return 0, nil, err
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.answers.Add(1)
		if err != nil {
			return 0, nil, err
		}
		if resp.StatusCode != http.StatusTooManyRequests {
			return resp.StatusCode, data, nil
		}
		c.throttled.Add(1)
		wait, perr := strconv.Atoi(resp.Header.Get("Retry-After"))
		if perr != nil {
			c.errors.Add(1) // a 429 must say when to come back
			wait = 1
		}
		select {
		case <-time.After(time.Duration(wait) * time.Second):
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		}
	}
}

// createAll creates n sandboxes at once and waits until each runs.
func (c *soakClient) createAll(ctx context.Context, n int) ([]string, error) {
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, data, err := c.do(ctx, http.MethodPost, "/sandboxes", map[string]any{"template": "base", "timeoutMs": 3600000, "labels": map[string]string{"soak": "1"}})
			var env struct {
				Data struct {
					ID string `json:"id"`
				} `json:"data"`
			}
			if err == nil && status != http.StatusCreated {
				err = fmt.Errorf("create: HTTP %d: %s", status, data)
			}
			if err == nil {
				err = json.Unmarshal(data, &env)
			}
			if err == nil {
				ids[i] = env.Data.ID
				err = c.awaitRunning(ctx, env.Data.ID)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return ids, err
		}
	}
	return ids, nil
}

// awaitRunning long-polls until the sandbox runs: each poll answers after
// at most 30 s, still pending when 50 cold starts share two cores.
func (c *soakClient) awaitRunning(ctx context.Context, id string) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		status, data, err := c.do(ctx, http.MethodGet, "/sandboxes/"+id+"?waitFor=running", nil)
		switch {
		case err != nil:
			return err
		case status == http.StatusOK && bytes.Contains(data, []byte(`"status":"running"`)):
			return nil
		case status != http.StatusOK || !bytes.Contains(data, []byte(`"status":"pending"`)) || time.Now().After(deadline):
			return fmt.Errorf("sandbox %s not running: HTTP %d: %s", id, status, data)
		}
	}
}

// command runs "echo i" and checks its output.
func (c *soakClient) command(ctx context.Context, id string, i int) error {
	status, data, err := c.do(ctx, http.MethodPost, "/sandboxes/"+id+"/commands", map[string]any{"cmd": "echo " + strconv.Itoa(i)})
	if err != nil {
		return err
	}
	var env struct {
		Data struct {
			Stdout string `json:"stdout"`
		} `json:"data"`
	}
	if status != http.StatusOK || json.Unmarshal(data, &env) != nil || env.Data.Stdout != strconv.Itoa(i)+"\n" {
		return fmt.Errorf("command in %s: HTTP %d: %s", id, status, data)
	}
	return nil
}

// deleteAll deletes the sandboxes, saying which could not be.
func (c *soakClient) deleteAll(ctx context.Context, ids []string) {
	for _, id := range ids {
		if id == "" {
			continue
		}
		if err := c.delete(ctx, id); err != nil {
			fmt.Fprintf(os.Stderr, "soak: delete %s: %v\n", id, err)
		}
	}
}

func (c *soakClient) delete(ctx context.Context, id string) error {
	status, data, err := c.do(ctx, http.MethodDelete, "/sandboxes/"+id, nil)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("HTTP %d: %s", status, data)
	}
	return err
}

// createRunning creates a sandbox from body and waits until it runs.
func (c *soakClient) createRunning(ctx context.Context, body map[string]any) (string, error) {
	status, data, err := c.do(ctx, http.MethodPost, "/sandboxes", body)
	if err == nil && status != http.StatusCreated {
		err = fmt.Errorf("create: HTTP %d: %s", status, data)
	}
	if err != nil {
		return "", err
	}
	id := sandboxID(data)
	return id, c.awaitRunning(ctx, id)
}

// run runs cmd in sandbox id and returns its stdout; a non-zero exit is
// an error.
func (c *soakClient) run(ctx context.Context, id, cmd string) (string, error) {
	status, data, err := c.do(ctx, http.MethodPost, "/sandboxes/"+id+"/commands", map[string]any{"cmd": cmd, "timeoutMs": 120000})
	if err != nil {
		return "", err
	}
	var env struct {
		Data struct {
			Stdout   string `json:"stdout"`
			ExitCode *int   `json:"exitCode"`
		} `json:"data"`
	}
	if status != http.StatusOK || json.Unmarshal(data, &env) != nil || env.Data.ExitCode == nil || *env.Data.ExitCode != 0 {
		return env.Data.Stdout, fmt.Errorf("command in %s: HTTP %d: %s", id, status, data)
	}
	return env.Data.Stdout, nil
}

// list is the ids of the account's sandboxes.
func (c *soakClient) list(ctx context.Context) ([]string, error) {
	status, data, err := c.do(ctx, http.MethodGet, "/sandboxes", nil)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("list: HTTP %d: %s", status, data)
	}
	if err != nil {
		return nil, err
	}
	var env struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, err
	}
	ids := make([]string, len(env.Data))
	for i, sb := range env.Data {
		ids[i] = sb.ID
	}
	return ids, nil
}
