package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

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

// spread runs total calls of f from workers goroutines at once.
func spread(total, workers int, name string, f func(i int) error) *row {
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
				err := f(i)
				mu.Lock()
				if err != nil {
					errs++
					fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
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
	return summarize(name, samples, errs)
}
