package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/backendproc"
)

// backend is one backend process under measurement.
type backend struct {
	proc *backendproc.Process
	url  string
}

func startBackend(bin, tokens, data string, pool int, logDir string, extra ...string) (*backend, error) {
	logf, err := os.Create(filepath.Join(logDir, "backend-"+filepath.Base(data)+".log"))
	if err != nil {
		return nil, err
	}
	p, err := backendproc.Start(backendproc.Options{
		Binary: bin,
		// One account is measured: it may hold the whole host's share
		// (the soak's 50 sandboxes are more than half of this host's).
		Args: append([]string{"--data", data, "--tokens", tokens, "--pull", "never", "--pool-size", strconv.Itoa(pool), "--log-level", "warn",
			"--host-share", "1"}, extra...),
		Log: logf,
	})
	if err != nil {
		return nil, fmt.Errorf("%v (see %s)", err, logf.Name())
	}
	return &backend{proc: p, url: p.URL()}, nil
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
	if err := b.proc.Stop(30 * time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "bench: backend exited:", err)
	}
}
