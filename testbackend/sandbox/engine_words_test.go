package sandbox

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// What a sandbox's owner is told when the engine fails: the backend's own
// words, never the engine's answer, which describes the host.

// engineRefusesStartRuntime fails every start as an engine would, with
// words about the host's setup.
type engineRefusesStartRuntime struct{ gateRuntime }

func (*engineRefusesStartRuntime) EnsureImage(context.Context, string) error { return nil }
func (*engineRefusesStartRuntime) Start(context.Context, container.Spec) (string, error) {
	return "", errors.New("runtime: create container from rarecloud/sandbox-python:latest: Error response from daemon: Range of CPUs is from 0.01 to 1.00, as there are only 1 CPUs available")
}

// A start the engine refuses ends the sandbox start_failed with a message
// of the backend's own: the engine's answer is not shown to the owner.
func TestEngineRefusalIsNotShown(t *testing.T) {
	m := newManager(t, &engineRefusesStartRuntime{}, ModeReal, t.TempDir())
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{Image: "example/any:1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := m.WaitStatus(ctx, "acct", res.Sandbox.ID, []string{StatusRunning, StatusExited, StatusTerminated})
	if err != nil {
		t.Fatalf("sandbox %s: %v", res.Sandbox.ID, err)
	}
	if v.Status != StatusTerminated || v.TerminationReason != ReasonStartFailed || !strings.HasPrefix(v.TerminationMessage, "the sandbox could not start: ") {
		t.Fatalf("sandbox %s: %s, %q, %q; want terminated, start_failed, the backend's message", v.ID, v.Status, v.TerminationReason, v.TerminationMessage)
	}
	for _, leak := range []string{"daemon", "CPUs", "rarecloud/sandbox-python", "runtime:"} {
		if strings.Contains(v.TerminationMessage, leak) {
			t.Errorf("the termination message %q shows the engine's answer (%q)", v.TerminationMessage, leak)
		}
	}
}

// listFailsRuntime's List fails while told to, as an engine that came
// back broken.
type listFailsRuntime struct {
	gateRuntime
	fails atomic.Bool
}

func (r *listFailsRuntime) List(context.Context) ([]container.Container, error) {
	if r.fails.Load() {
		return nil, errors.New("Error response from daemon: secret engine words")
	}
	return nil, nil
}

// A reconciliation that fails after the engine came back answers 503
// in the backend's words: the engine's own stay in the log.
func TestReconcileFailureIsNotShown(t *testing.T) {
	rt := &listFailsRuntime{}
	m := newManager(t, rt, ModeReal, t.TempDir())
	m.engineDown(container.ErrEngineUnavailable) // it was away: the next check reconciles
	rt.fails.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := m.EngineAvailable(ctx)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeServiceUnavailable || !strings.Contains(e.Message, "reconciling") {
		t.Fatalf("the engine check while reconciliation fails: %v, want %s about reconciling", err, CodeServiceUnavailable)
	}
	if strings.Contains(e.Message, "secret engine words") || strings.Contains(e.Message, "daemon") {
		t.Errorf("the answer %q shows the engine's words", e.Message)
	}
}

// programMissingRuntime fails every start as the Docker runtime does for
// a run-mode program its image lacks.
type programMissingRuntime struct{ gateRuntime }

func (*programMissingRuntime) EnsureImage(context.Context, string) error { return nil }
func (*programMissingRuntime) Start(context.Context, container.Spec) (string, error) {
	return "", &container.StartRefusedError{Msg: `its program "/nope" is not in image example/any:1`, Err: errors.New("Error response from daemon: OCI runtime start failed")}
}

// A program the image lacks ends the sandbox start_failed with the
// runtime's words naming it, which the owner can act on.
func TestMissingProgramIsNamed(t *testing.T) {
	m := newManager(t, &programMissingRuntime{}, ModeReal, t.TempDir())
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{Image: "example/any:1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := m.WaitStatus(ctx, "acct", res.Sandbox.ID, []string{StatusRunning, StatusExited, StatusTerminated})
	if err != nil {
		t.Fatalf("sandbox %s: %v", res.Sandbox.ID, err)
	}
	want := `the sandbox could not start: its program "/nope" is not in image example/any:1`
	if v.Status != StatusTerminated || v.TerminationReason != ReasonStartFailed || v.TerminationMessage != want {
		t.Fatalf("sandbox %s: %s, %q, %q; want terminated, start_failed, %q", v.ID, v.Status, v.TerminationReason, v.TerminationMessage, want)
	}
}
