// Package testmode is the runtime of the backend's test mode: an engine
// that runs nothing. A container is up as soon as Start returns, a
// run-mode program has "exited" 0 by then, every command "exits" 0 with
// no output, logs are empty and a file written is read back as it was.
// Containers and their files are kept in a directory, one JSON file each
// (disk.go), so they survive a backend restart as Docker's containers do
// and reconciliation finds them.
package testmode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Runtime is the test mode's container.Runtime. Every method is safe for
// concurrent use.
type Runtime struct {
	dir string
	mu  sync.Mutex
	// boxes holds the containers by id.
	boxes map[string]*box
}

// box is one container: what disk.go keeps of it, and its watchers.
type box struct {
	ID        string            `json:"id"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels,omitempty"`
	RunMode   bool              `json:"runMode,omitempty"` // its program "exited" 0 as it started
	CreatedAt time.Time         `json:"createdAt"`
	Files     map[string]string `json:"files,omitempty"` // by absolute path

	// wmu orders the box's writes to disk (disk.go).
	wmu  sync.Mutex
	gone chan struct{} // closed once it is removed
}

var (
	_ container.Runtime   = (*Runtime)(nil)
	_ container.Immediate = (*Runtime)(nil)
)

// Open loads the containers kept in dir, creating it if needed.
func Open(dir string) (*Runtime, error) {
	r := &Runtime{dir: dir, boxes: map[string]*box{}}
	if err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// Immediate says that Start returns with the container up and its
// run-mode program ended: nothing runs (container.Immediate).
func (r *Runtime) Immediate() bool { return true }

// Ping always answers: there is no engine to lose.
func (r *Runtime) Ping(context.Context) error { return nil }

// Address names what stands in for the engine, for messages.
func (r *Runtime) Address() string { return "test mode (no container engine)" }

// EnsureImage accepts every image: none is pulled or run.
func (r *Runtime) EnsureImage(context.Context, string) error { return nil }

// Start records a container; a name in use is refused as the engine
// refuses it.
func (r *Runtime) Start(_ context.Context, spec container.Spec) (string, error) {
	b := &box{ID: newID(), Name: spec.Name, Labels: maps.Clone(spec.Labels), RunMode: spec.RunMode, CreatedAt: time.Now().UTC(), gone: make(chan struct{})}
	r.mu.Lock()
	for _, o := range r.boxes {
		if o.Name == spec.Name {
			r.mu.Unlock()
			return "", fmt.Errorf("testmode: the container name %q is already in use", spec.Name)
		}
	}
	r.boxes[b.ID] = b
	r.mu.Unlock()
	if err := r.save(b); err != nil {
		_ = r.Remove(context.Background(), b.ID)
		return "", err
	}
	return b.ID, nil
}

// Wait answers at once for a run-mode container (its program exited 0);

// Prepare has nothing to ready: a container of this runtime answers its
// first command as fast as any other.
func (r *Runtime) Prepare(context.Context, string) error { return nil }

// a keepalive runs until the container is removed.
func (r *Runtime) Wait(ctx context.Context, id string) container.Exit {
	r.mu.Lock()
	b := r.boxes[id]
	r.mu.Unlock()
	switch {
	case b == nil:
		return container.Exit{Code: -1, Err: fmt.Errorf("testmode: container %s: %w", id, container.ErrNotFound)}
	case b.RunMode:
		return container.Exit{Code: 0}
	}
	select {
	case <-b.gone:
		return container.Exit{Code: 137, Removed: true}
	case <-ctx.Done():
		return container.Exit{Code: -1, Err: ctx.Err()}
	}
}

// running returns the container when it is there and running.
func (r *Runtime) running(id string) (*box, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.boxes[id]
	switch {
	case b == nil:
		return nil, fmt.Errorf("testmode: container %s: %w", id, container.ErrNotFound)
	case b.RunMode:
		return nil, fmt.Errorf("testmode: container %s: %w", id, container.ErrNotRunning)
	}
	return b, nil
}

// Exec runs nothing: every process exits 0 at once, without output.
func (r *Runtime) Exec(_ context.Context, id string, _ container.ExecRequest) (container.ExecResult, error) {
	if _, err := r.running(id); err != nil {
		return container.ExecResult{}, fmt.Errorf("%w: %w", container.ErrExecNotStarted, err)
	}
	zero := 0
	return container.ExecResult{ExitCode: &zero}, nil
}

// Logs are empty: no program ran.
func (r *Runtime) Logs(_ context.Context, id string, _ int, _ container.Pacer) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.boxes[id] == nil {
		return nil, fmt.Errorf("testmode: container %s: %w", id, container.ErrNotFound)
	}
	return nil, nil
}

// Remove removes a container, by id or name, and its files; one that is
// not there counts as removed.
func (r *Runtime) Remove(_ context.Context, ref string) error {
	r.mu.Lock()
	var gone []*box
	for id, b := range r.boxes {
		if id == ref || b.Name == strings.TrimPrefix(ref, "/") {
			delete(r.boxes, id)
			close(b.gone)
			gone = append(gone, b)
		}
	}
	r.mu.Unlock()
	for _, b := range gone {
		if err := r.drop(b); err != nil {
			return err
		}
	}
	return nil
}

// List returns every container: a keepalive runs, a run-mode one has exited 0.
func (r *Runtime) List(context.Context) ([]container.Container, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]container.Container, 0, len(r.boxes))
	for _, b := range r.boxes {
		out = append(out, container.Container{ID: b.ID, Name: b.Name, Labels: maps.Clone(b.Labels), Running: !b.RunMode, CreatedAt: b.CreatedAt})
	}
	return out, nil
}

func newID() string {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(raw[:])
}

// Close releases nothing: every change is on disk when its call returns.
func (r *Runtime) Close() error { return nil }
