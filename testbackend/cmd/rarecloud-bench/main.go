// Command rarecloud-bench measures the test backend side by side with the
// raw engine it runs on (`make bench`). It starts two backends as separate
// processes (one with a warm pool, one without), measures each operation,
// measures the floor (the same work done directly through the Docker API)
// in the same run, and prints a table with p50/p95/max and the ratio to
// the floor, plus a JSON file. Figures, not assertions: these machines are
// shared and noisy, so compare ratios from one run.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	rt "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/runtime"
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

// row is one line of the table.
type row struct {
	Name    string    `json:"name"`
	Count   int       `json:"count"`
	Errors  int       `json:"errors"`
	P50     float64   `json:"p50Ms"`
	P95     float64   `json:"p95Ms"`
	Max     float64   `json:"maxMs"`
	Floor   string    `json:"floor,omitempty"`
	Ratio   float64   `json:"ratioToFloorP50,omitempty"`
	Samples []float64 `json:"-"`
}

type report struct {
	Machine string            `json:"machine"`
	Date    string            `json:"date"`
	Rows    []*row            `json:"rows"`
	Memory  map[string]string `json:"memory"`
	Notes   []string          `json:"notes"`
}

func summarize(name string, samples []time.Duration, errs int) *row {
	r := &row{Name: name, Count: len(samples), Errors: errs}
	if len(samples) == 0 {
		return r
	}
	ms := make([]float64, len(samples))
	for i, s := range samples {
		ms[i] = float64(s.Microseconds()) / 1000
	}
	sort.Float64s(ms)
	r.Samples = ms
	r.P50 = pct(ms, 0.50)
	r.P95 = pct(ms, 0.95)
	r.Max = ms[len(ms)-1]
	return r
}

func pct(sorted []float64, p float64) float64 {
	i := int(float64(len(sorted)-1)*p + 0.5)
	return sorted[i]
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
	if out, err := exec.Command("go", "build", "-o", bin, "./testbackend/cmd/rarecloud-testbackend").CombinedOutput(); err != nil {
		return fmt.Errorf("build backend: %v\n%s", err, out)
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
	rep.Memory["backend RSS, idle (warm pool full)"] = rss(warm.cmd.Process.Pid)

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
	rep.Memory["backend RSS, 20 sandboxes"] = rss(warm.cmd.Process.Pid)
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

var floorOrder = []string{
	"floor: container create+start (runsc)",
	"floor: exec echo hi",
	"floor: create+start, then exec echo",
	"floor: exec python3 -c print",
	"floor: exec node -e",
	"floor: container remove",
}

// measureFloor does the work with the Docker API alone: no HTTP, no
// records, the same runtime settings.
func measureFloor(ctx context.Context, o options) (map[string]*row, error) {
	d, err := rt.NewDocker(rt.DockerOptions{Instance: fmt.Sprintf("bench-floor-%d", os.Getpid()), PullPolicy: "never", Agent: rt.AgentNone})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	spec := func(image string) rt.Spec {
		return rt.Spec{Name: "rarecloud-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36), Image: image, NanoCPUs: 1e9, MemoryBytes: 1 << 30, HomeBytes: 2 << 30, TmpBytes: 1 << 30, MaxProcs: 512}
	}
	out := map[string]*row{}
	var starts, removes, firsts []time.Duration
	errs := 0
	for i := 0; i < o.n/2; i++ {
		t0 := time.Now()
		id, err := d.Start(ctx, spec(sandbox.ImageBase))
		if err != nil {
			errs++
			continue
		}
		starts = append(starts, time.Since(t0))
		if _, err := d.Exec(ctx, id, rt.ExecRequest{Cmd: []string{"echo", "hi"}, MaxOutput: 1 << 20}); err != nil {
			errs++
		}
		firsts = append(firsts, time.Since(t0))
		t1 := time.Now()
		_ = d.Remove(ctx, id)
		removes = append(removes, time.Since(t1))
	}
	out[floorOrder[0]] = summarize(floorOrder[0], starts, errs)
	out[floorOrder[2]] = summarize(floorOrder[2], firsts, errs)
	out[floorOrder[5]] = summarize(floorOrder[5], removes, 0)
	for _, c := range []struct {
		image, name string
		argv        []string
		n           int
	}{
		{sandbox.ImageBase, floorOrder[1], []string{"echo", "hi"}, o.n * 5},
		{sandbox.ImagePython, floorOrder[3], []string{"python3", "-c", "print('hi')"}, o.n},
		{sandbox.ImageNode, floorOrder[4], []string{"node", "-e", "console.log('hi')"}, o.n / 2},
	} {
		id, err := d.Start(ctx, spec(c.image))
		if err != nil {
			return nil, err
		}
		out[c.name] = repeat(c.n, func() error {
			_, err := d.Exec(ctx, id, rt.ExecRequest{Cmd: c.argv, Timeout: time.Minute, MaxOutput: 1 << 20})
			return err
		}, c.name)
		_ = d.Remove(ctx, id)
	}
	return out, nil
}

func repeat(n int, f func() error, name string) *row {
	var samples []time.Duration
	errs := 0
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			errs++
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
			continue
		}
		samples = append(samples, time.Since(t0))
	}
	return summarize(name, samples, errs)
}

// echo runs `echo hi`, the command every command row measures.
func echo(ctx context.Context, c *client.Client, id string) error {
	res, err := c.RunCommand(ctx, id, client.CommandRequest{Cmd: "echo hi"})
	if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
		err = fmt.Errorf("exit code %v: %s", res.ExitCode, res.Stderr)
	}
	return err
}

func runCode(ctx context.Context, c *client.Client, id, lang, code string) error {
	res, err := c.RunCode(ctx, id, client.RunCodeRequest{Language: lang, Code: code})
	if err == nil && (res.ExitCode == nil || *res.ExitCode != 0) {
		err = fmt.Errorf("exit code %v: %s", res.ExitCode, res.Stderr)
	}
	return err
}

// waitRunning asks the backend to answer when the sandbox runs
// (GET …?waitFor=running): one request, no polling.
func waitRunning(ctx context.Context, c *client.Client, sb *client.Sandbox) error {
	if sb.Status == "pending" {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL()+"/sandboxes/"+sb.ID+"?waitFor=running&timeoutMs=60000", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var env struct {
			Data client.Sandbox `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
			return err
		}
		sb = &env.Data
	}
	if sb.Status != "running" {
		return fmt.Errorf("sandbox %s is %s: %s", sb.ID, sb.Status, sb.TerminationReason)
	}
	return nil
}

func ready(ctx context.Context, c *client.Client, template string) (string, error) {
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: template, TimeoutMs: 3600_000})
	if err != nil {
		return "", err
	}
	return sb.ID, waitRunning(ctx, c, sb)
}

func createToRunning(ctx context.Context, c *client.Client, n int, name, template string, pool *backend) *row {
	var samples []time.Duration
	var ids []string
	errs := 0
	for i := 0; i < n; i++ {
		if pool != nil {
			_ = pool.waitPool(ctx, 1)
		}
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: template})
		if err == nil {
			err = waitRunning(ctx, c, sb)
		}
		if err != nil {
			errs++
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
			continue
		}
		samples = append(samples, time.Since(t0))
		ids = append(ids, sb.ID)
	}
	for _, id := range ids {
		_ = c.DeleteSandbox(ctx, id)
	}
	return summarize(name, samples, errs)
}

func createToFirst(ctx context.Context, c *client.Client, n int, name, template string, pool *backend, first func(id string) error) *row {
	var samples []time.Duration
	var ids []string
	errs := 0
	for i := 0; i < n; i++ {
		if pool != nil {
			_ = pool.waitPool(ctx, 1)
		}
		t0 := time.Now()
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: template})
		if err == nil {
			ids = append(ids, sb.ID)
			err = waitRunning(ctx, c, sb)
		}
		if err == nil {
			err = first(sb.ID)
		}
		if err != nil {
			errs++
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
			continue
		}
		samples = append(samples, time.Since(t0))
	}
	for _, id := range ids {
		_ = c.DeleteSandbox(ctx, id)
	}
	return summarize(name, samples, errs)
}

func deleteToGone(ctx context.Context, c *client.Client, n int) *row {
	var samples []time.Duration
	errs := 0
	for i := 0; i < n; i++ {
		id, err := ready(ctx, c, "base")
		if err != nil {
			errs++
			continue
		}
		t0 := time.Now()
		if err := c.DeleteSandbox(ctx, id); err != nil {
			errs++
			continue
		}
		if _, err := c.GetSandbox(ctx, id); !client.IsNotFound(err) {
			errs++
			continue
		}
		samples = append(samples, time.Since(t0))
	}
	return summarize("delete → gone", samples, errs)
}

func concurrentCreates(ctx context.Context, c *client.Client, n int) (*row, []string) {
	var mu sync.Mutex
	var samples []time.Duration
	var ids []string
	errs := 0
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base", TimeoutMs: 3600_000})
			if err == nil {
				err = waitRunning(ctx, c, sb)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs++
				fmt.Fprintf(os.Stderr, "bench: concurrent create: %v\n", err)
				if sb != nil {
					ids = append(ids, sb.ID)
				}
				return
			}
			samples = append(samples, time.Since(t0))
			ids = append(ids, sb.ID)
		}()
	}
	wg.Wait()
	return summarize(fmt.Sprintf("%d concurrent creates → running", n), samples, errs), ids
}

func spreadCommands(ctx context.Context, c *client.Client, ids []string, total, workers int) *row {
	var mu sync.Mutex
	var samples []time.Duration
	errs := 0
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				t0 := time.Now()
				err := echo(ctx, c, ids[i%len(ids)])
				mu.Lock()
				if err != nil {
					errs++
				} else {
					samples = append(samples, time.Since(t0))
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < total; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return summarize(fmt.Sprintf("%d commands over %d sandboxes, %d at once", total, len(ids), workers), samples, errs)
}

// backend is one backend process.
type backend struct {
	cmd  *exec.Cmd
	url  string
	done chan error
}

func startBackend(bin, tokens, data string, pool int, logDir string) (*backend, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(logDir, "backend-"+filepath.Base(data)+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--listen", addr, "--data", data, "--tokens", tokens, "--pull", "never", "--pool-size", strconv.Itoa(pool), "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b := &backend{cmd: cmd, url: "http://" + addr + "/v1", done: make(chan error, 1)}
	go func() { b.done <- cmd.Wait(); logf.Close() }()
	// Wait for the port with backoff; the process exiting is an error.
	wait := 10 * time.Millisecond
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return b, nil
		}
		select {
		case err := <-b.done:
			return nil, fmt.Errorf("backend exited: %v (see %s)", err, logf.Name())
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			b.stop()
			return nil, errors.New("backend did not listen within 2 minutes")
		}
		wait = min(wait*2, 500*time.Millisecond)
	}
}

func (b *backend) client() *client.Client {
	c, err := client.New(client.Config{BaseURL: b.url, Token: token, UserAgent: "rarecloud-bench"})
	if err != nil {
		panic(err)
	}
	return c
}

// waitPool waits until every template has at least want warm containers,
// as the backend's /v1/health reports them.
func (b *backend) waitPool(ctx context.Context, want int) error {
	if want <= 0 {
		return nil
	}
	healthURL := b.url + "/health"
	deadline := time.Now().Add(5 * time.Minute)
	wait := 10 * time.Millisecond
	var last map[string]int
	for {
		var h struct {
			Data struct {
				Pool map[string]int `json:"pool"`
			} `json:"data"`
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, healthURL, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
		}
		last = h.Data.Pool
		if last["base"] >= want && last["python"] >= want && last["node"] >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warm pool not full after 5 minutes: %v", last)
		}
		time.Sleep(wait)
		wait = min(wait*2, 200*time.Millisecond)
	}
}

func (b *backend) stop() {
	if b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-b.done:
			if err != nil && !strings.Contains(err.Error(), "signal") {
				fmt.Fprintln(os.Stderr, "bench: backend exited:", err)
			}
		case <-time.After(30 * time.Second):
			_ = b.cmd.Process.Kill()
		}
	}
}

func rss(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:"))
		}
	}
	return "unknown"
}

func machine() string {
	cpu := "unknown cpu"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(data), "\n", 2)[0])[1]
		if kb, err := strconv.Atoi(mem); err == nil {
			mem = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d vCPU (%s), %s RAM, Linux %s, %s", runtime.NumCPU(), cpu, mem, strings.TrimSpace(string(kernel)), runtime.Version())
}

func writeReport(rep *report, dir string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Machine: %s\nDate: %s\n\n", rep.Machine, rep.Date)
	fmt.Fprintf(&b, "| operation | count | errors | p50 ms | p95 ms | max ms | ratio to floor (p50) |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rep.Rows {
		ratio := ""
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f× %s", r.Ratio, strings.TrimPrefix(r.Floor, "floor: "))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f | %.1f | %.1f | %s |\n", r.Name, r.Count, r.Errors, r.P50, r.P95, r.Max, ratio)
	}
	keys := make([]string, 0, len(rep.Memory))
	for k := range rep.Memory {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteString("\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %s\n", k, rep.Memory[k])
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	fmt.Print(b.String())
	if err := os.WriteFile(filepath.Join(dir, "results.md"), b.Bytes(), 0o644); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644)
}

// terraformRows applies and destroys ten sandboxes with the provider
// built from this tree, through a dev_overrides CLI config of its own.
func terraformRows(ctx context.Context, b *backend, work string) (*row, *row, error) {
	if _, err := exec.LookPath("terraform"); err != nil {
		return nil, nil, errors.New("terraform is not on PATH")
	}
	pdir := filepath.Join(work, "provider")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(pdir, "terraform-provider-rarecloud"), ".").CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("build provider: %v\n%s", err, out)
	}
	cfg := filepath.Join(work, "terraformrc")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"rarecloudio/rarecloud\" = %q\n  }\n  direct {}\n}\n", pdir)), 0o644); err != nil {
		return nil, nil, err
	}
	tf := filepath.Join(work, "tf")
	if err := os.MkdirAll(tf, 0o755); err != nil {
		return nil, nil, err
	}
	main := fmt.Sprintf(`terraform {
  required_providers {
    rarecloud = { source = "rarecloudio/rarecloud" }
  }
}

provider "rarecloud" {
  api   = %q
  token = %q
}

resource "rarecloud_sandbox" "bench" {
  count      = 10
  template   = "base"
  timeout_ms = 600000
}
`, b.url, token)
	if err := os.WriteFile(filepath.Join(tf, "main.tf"), []byte(main), 0o644); err != nil {
		return nil, nil, err
	}
	runTF := func(args ...string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, "terraform", args...)
		cmd.Dir = tf
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+cfg, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("terraform %s: %v\n%s", args[0], err, out)
		}
		return time.Since(t0), nil
	}
	apply, err := runTF("apply", "-auto-approve", "-input=false", "-parallelism=10", "-no-color")
	if err != nil {
		return nil, nil, err
	}
	destroy, err := runTF("destroy", "-auto-approve", "-input=false", "-parallelism=10", "-no-color")
	if err != nil {
		return nil, nil, err
	}
	return summarize("terraform apply, 10 sandboxes (wall)", []time.Duration{apply}, 0),
		summarize("terraform destroy, 10 sandboxes (wall)", []time.Duration{destroy}, 0), nil
}
