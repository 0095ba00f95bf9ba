package sandbox

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/testmode"
)

// gateRuntime is an engine whose image check blocks until released, so a
// test can hold a create in flight. Everything else is refused: these
// tests cover the manager's own logic; the real engine is tested in the
// api and container packages.
type gateRuntime struct {
	gate    chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (g *gateRuntime) Ping(context.Context) error { return nil }
func (g *gateRuntime) Address() string            { return "fake" }
func (g *gateRuntime) EnsureImage(ctx context.Context, _ string) error {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.gate:
		return container.ErrImageUnavailable
	case <-ctx.Done():
		return ctx.Err()
	}
}
func (g *gateRuntime) Start(context.Context, container.Spec) (string, error) {
	return "", errors.New("not used")
}
func (g *gateRuntime) Wait(context.Context, string) container.Exit {
	return container.Exit{Err: io.EOF}
}
func (g *gateRuntime) Exec(context.Context, string, container.ExecRequest) (container.ExecResult, error) {
	return container.ExecResult{}, errors.New("not used")
}
func (*gateRuntime) Prepare(context.Context, string) error { return nil }
func (g *gateRuntime) WriteFile(context.Context, string, string, string, container.Pacer) error {
	return errors.New("not used")
}
func (g *gateRuntime) ReadFile(context.Context, string, string, int, container.Pacer) ([]byte, error) {
	return nil, errors.New("not used")
}
func (g *gateRuntime) Logs(context.Context, string, int, container.Pacer) ([]byte, error) {
	return nil, nil
}
func (g *gateRuntime) Remove(context.Context, string) error                { return nil }
func (g *gateRuntime) List(context.Context) ([]container.Container, error) { return nil, nil }
func (g *gateRuntime) Close() error                                        { return nil }

// testRuntime is the test mode's runtime (package testmode), keeping its
// containers under dir as a backend keeps them under its data directory.
func testRuntime(t *testing.T, dir string) container.Runtime {
	t.Helper()
	rt, err := testmode.Open(filepath.Join(dir, "testmode"))
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func newManager(t *testing.T, rt container.Runtime, mode string, dir string) *Manager {
	t.Helper()
	return newManagerWith(t, Config{Mode: mode, Runtime: rt}, dir)
}

// newManagerWith is newManager with more of the configuration: cfg's
// store is opened at dir.
func newManagerWith(t *testing.T, cfg Config, dir string) *Manager {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = st
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func TestIdempotencyKeyInProgress(t *testing.T) {
	rt := &gateRuntime{gate: make(chan struct{}), entered: make(chan struct{})}
	m := newManager(t, rt, ModeReal, t.TempDir())
	req := CreateRequest{Image: "example/slow:1"}
	done := make(chan error, 1)
	go func() {
		_, err := m.Create(context.Background(), "acct", "k1", req)
		done <- err
	}()
	<-rt.entered
	_, err := m.Create(context.Background(), "acct", "k1", req)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeIdempotencyInProgress || e.RetryAfter < 1 {
		t.Fatalf("second create while first in flight: %v", err)
	}
	// Another account's identical key is not blocked.
	_, err = m.Create(context.Background(), "other", "k1", CreateRequest{Template: "nope"})
	if !errors.As(err, &e) || e.Code != CodeUnknownTemplate {
		t.Fatalf("other account: %v", err)
	}
	close(rt.gate)
	if err := <-done; !errors.As(err, &e) || e.Code != CodeImagePullFailed {
		t.Fatalf("first create: %v", err)
	}
	// The client error spent the key: it is replayed, not retried.
	res, err := m.Create(context.Background(), "acct", "k1", req)
	if !errors.As(err, &e) || e.Code != CodeImagePullFailed || !res.Replayed {
		t.Fatalf("replay: %+v %v", res, err)
	}
}

func TestIdempotencyKeysSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, testRuntime(t, dir), ModeTest, dir)
	req := CreateRequest{Template: "python", Labels: map[string]string{"a": "b"}}
	first, err := m.Create(context.Background(), "acct", "key", req)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m2 := newManager(t, testRuntime(t, dir), ModeTest, dir)
	again, err := m2.Create(context.Background(), "acct", "key", req)
	if err != nil || !again.Replayed || again.Sandbox.ID != first.Sandbox.ID {
		t.Fatalf("after restart: %+v %v", again, err)
	}
	_, err = m2.Create(context.Background(), "acct", "key", CreateRequest{Template: "node"})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeIdempotencyKeyReused {
		t.Fatalf("different body after restart: %v", err)
	}
	// Defaults are part of the body: {} and an explicit base are the same request.
	a, _ := m2.Create(context.Background(), "acct", "defaults", CreateRequest{})
	b, err := m2.Create(context.Background(), "acct", "defaults", CreateRequest{Template: "base"})
	if err != nil || !b.Replayed || a.Sandbox.ID != b.Sandbox.ID {
		t.Fatalf("defaults: %+v %v", b, err)
	}
}

func TestValidateCreate(t *testing.T) {
	m := newManager(t, testRuntime(t, t.TempDir()), ModeTest, t.TempDir())
	long := strings.Repeat("k", MaxLabelKeyLen+1)
	for name, tc := range map[string]struct {
		req  CreateRequest
		code string
	}{
		"label key too long":    {CreateRequest{Labels: map[string]string{long: "v"}}, CodeInvalidLabels},
		"label value control":   {CreateRequest{Labels: map[string]string{"k": "a\nb"}}, CodeInvalidLabels},
		"env NUL":               {CreateRequest{Env: map[string]string{"K": "a\x00"}}, CodeInvalidEnv},
		"env name dash":         {CreateRequest{Env: map[string]string{"MY-VAR": "x"}}, CodeInvalidEnv},
		"empty entrypoint":      {CreateRequest{Entrypoint: []string{""}}, CodeInvalidCommand},
		"too many args":         {CreateRequest{Cmd: make([]string, MaxArgs+1)}, CodeInvalidCommand},
		"image with spaces":     {CreateRequest{Image: "a b"}, CodeInvalidImage},
		"unknown template":      {CreateRequest{Template: "gpu"}, CodeUnknownTemplate},
		"timeout zero allowed?": {CreateRequest{TimeoutMs: ptr(int64(0))}, CodeInvalidTimeout},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := m.Create(context.Background(), "acct", "", tc.req)
			var e *Error
			if !errors.As(err, &e) || e.Code != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
		})
	}
	for _, ok := range []CreateRequest{
		{TimeoutMs: ptr(int64(MinTimeoutMs))},
		{TimeoutMs: ptr(int64(MaxTimeoutMs))},
		{Image: "nginx:1.27", Labels: map[string]string{"terraform_workspace": "default", "team/app.name-1": "x"}},
		{Env: map[string]string{"_X1": "é ✓"}},
	} {
		if _, err := m.Create(context.Background(), "acct", "", ok); err != nil {
			t.Errorf("%+v rejected: %v", ok, err)
		}
	}
}

// TestExpiryAndRetentionInTestMode: a sandbox whose lifetime ends and an
// exited job whose retention ends both go, records included; both existed
// (readable, on disk) before.
func TestExpiryAndRetentionInTestMode(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeTest, Runtime: testRuntime(t, t.TempDir()), Store: st, Retention: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	short, err := m.Create(context.Background(), "acct", "", CreateRequest{TimeoutMs: ptr(int64(MinTimeoutMs))})
	if err != nil {
		t.Fatal(err)
	}
	job, err := m.Create(context.Background(), "acct", "", CreateRequest{Run: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{short.Sandbox.ID, job.Sandbox.ID} {
		if _, err := m.Get("acct", id); err != nil {
			t.Fatalf("%s not readable right after its create: %v", id, err)
		}
	}
	if recs, err := st.Sandboxes(); err != nil || len(recs) != 2 {
		t.Fatalf("records on disk after the creates: %d (%v), want 2", len(recs), err)
	}
	// Gone once their time is up: waited for, not slept on.
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range []string{short.Sandbox.ID, job.Sandbox.ID} {
		for {
			var e *Error
			_, err := m.Get("acct", id)
			if errors.As(err, &e) && e.Code == CodeNotFound {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still there 30 s after its time was up: %v", id, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	recs, err := st.Sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Errorf("%d records left on disk", len(recs))
	}
}

func ptr[T any](v T) *T { return &v }

// failingStart is a runtime whose every container start fails (not
// because the engine is away: the start itself is refused).
type failingStart struct{ gateRuntime }

func (*failingStart) EnsureImage(context.Context, string) error { return nil }
func (*failingStart) Start(context.Context, container.Spec) (string, error) {
	return "", errors.New("the runtime refused the container")
}

// TestEnvValuesLeaveAFailedStart: a sandbox whose start fails ends
// start_failed, and its env values leave the record at once, as they do
// after a start that succeeds; the names stay.
func TestEnvValuesLeaveAFailedStart(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, &failingStart{}, ModeReal, dir)
	const secret = "env-secret-of-a-failed-start"
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{Image: "example/fails:1", Env: map[string]string{"API_SECRET": secret}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := m.WaitStatus(ctx, "acct", res.Sandbox.ID, []string{StatusTerminated})
	if err != nil || v.TerminationReason != ReasonStartFailed {
		t.Fatalf("after the failed start: %+v %v", v, err)
	}
	// Records are written behind the answer: wait until the terminated
	// one is on disk.
	record := filepath.Join(dir, "sandboxes", res.Sandbox.ID+".json")
	for {
		data, err := os.ReadFile(record)
		if err == nil && strings.Contains(string(data), `"status":"terminated"`) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the terminated record never reached the disk: %s %v", data, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var holding []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(data), secret) {
			holding = append(holding, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(holding) != 0 {
		t.Errorf("the env value is still at rest after the start failed: %v", holding)
	}
	if len(v.EnvKeys) != 1 || v.EnvKeys[0] != "API_SECRET" {
		t.Errorf("envKeys: %v", v.EnvKeys)
	}
}
