package docker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// heldPacer lets budget bytes through, counting every byte it is asked
// for; past the budget it holds each WaitN until released.
type heldPacer struct {
	mu      sync.Mutex
	charged int
	budget  int
	held    chan struct{} // closed when a WaitN first waits
	release chan struct{}
	once    sync.Once
}

func newHeldPacer(budget int) *heldPacer {
	return &heldPacer{budget: budget, held: make(chan struct{}), release: make(chan struct{})}
}

func (p *heldPacer) WaitN(ctx context.Context, n int) error {
	p.mu.Lock()
	over := p.charged+n > p.budget
	p.mu.Unlock()
	if over {
		p.once.Do(func() { close(p.held) })
		select {
		case <-p.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	p.charged += n
	p.mu.Unlock()
	return nil
}

func (p *heldPacer) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charged
}

// afterward says, for a transfer that failed, how the container's agent
// session stands and whether a command still gets an answer: a stuck
// session or agent fails that too, a lost request does not.
func afterward(d *Runtime, id string) string {
	over := agentTransport(d, id)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	res, err := d.Exec(ctx, id, container.ExecRequest{Cmd: []string{"echo", "ok"}, Timeout: 10 * time.Second, MaxOutput: 1 << 10})
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case err != nil:
		return fmt.Sprintf("%s; a command after it: %v after %v", over, err, took)
	case res.ExitCode == nil:
		return fmt.Sprintf("%s; a command after it got no exit code (timed out: %v) after %v", over, res.TimedOut, took)
	}
	return fmt.Sprintf("%s; a command after it answered exit %d, %q, in %v", over, *res.ExitCode, res.Stdout, took)
}

// TestFileTransfersMoveAtTheirPace: a file write's content and a file
// read's answer pass through their pacer, every byte, on both exec paths:
// while the pacer holds, the transfer does not end, and once it lets go
// the file arrives whole. A command after a paced read on the same agent
// session is not held.
func TestFileTransfersMoveAtTheirPace(t *testing.T) {
	t.Parallel()
	execModes(t, func(t *testing.T, opts Options) {
		d := requireEngine(t, opts)
		id := start(t, d, testSpec(t))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const size = 3 << 20
		content := strings.Repeat("<paced>\n", size/8)
		const budget = 1 << 20

		transfer := func(what string, run func(p container.Pacer) error) {
			t.Helper()
			p := newHeldPacer(budget)
			done := make(chan error, 1)
			go func() { done <- run(p) }()
			select {
			case <-p.held:
			case err := <-done:
				t.Fatalf("the %s ended (%v) without its pacer holding it after %d bytes", what, err, budget)
			}
			select {
			case err := <-done:
				t.Fatalf("the %s ended (%v) while its pacer held it", what, err)
			case <-time.After(200 * time.Millisecond):
			}
			close(p.release)
			released := time.Now()
			if err := <-done; err != nil {
				t.Fatalf("the %s: %v, %v after its pacer let go; %s", what, err, time.Since(released).Round(time.Millisecond), afterward(d, id))
			}
			if got := p.total(); got < size {
				t.Fatalf("the %s charged its pacer %d bytes, want at least the file's %d", what, got, size)
			}
		}
		path := "/home/user/paced.txt"
		transfer("write", func(p container.Pacer) error { return d.WriteFile(ctx, id, path, content, p) })
		var got []byte
		transfer("read", func(p container.Pacer) error {
			var err error
			got, err = d.ReadFile(ctx, id, path, 8<<20, p)
			return err
		})
		if string(got) != content {
			t.Fatalf("read back %d bytes, wrote %d", len(got), len(content))
		}
		res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "wc -c < " + path}, Timeout: 10 * time.Second, MaxOutput: 1 << 10})
		wantExit(t, res, 0)
		if strings.TrimSpace(string(res.Stdout)) != strconv.Itoa(size) {
			t.Fatalf("wc -c: %q", res.Stdout)
		}
	})
}
