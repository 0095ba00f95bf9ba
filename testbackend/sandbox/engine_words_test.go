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

// startFailsRuntime has every image at create and fails every start
// with what fail says.
type startFailsRuntime struct {
	gateRuntime
	fail func(container.Spec) error
}

func (*startFailsRuntime) EnsureImage(context.Context, string) error { return nil }
func (r *startFailsRuntime) Start(_ context.Context, spec container.Spec) (string, error) {
	return "", r.fail(spec)
}

// afterFailedStart creates a sandbox of image on a runtime whose start
// fails with fail, and returns the sandbox once it has ended.
func afterFailedStart(t *testing.T, image string, fail func(container.Spec) error) View {
	t.Helper()
	m := newManager(t, &startFailsRuntime{fail: fail}, ModeReal, t.TempDir())
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{Image: image})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := m.WaitStatus(ctx, "acct", res.Sandbox.ID, []string{StatusRunning, StatusExited, StatusTerminated})
	if err != nil {
		t.Fatalf("sandbox %s: %v", res.Sandbox.ID, err)
	}
	return v
}

// A start the engine refuses ends the sandbox start_failed with a message
// of the backend's own: the engine's answer is not shown to the owner.
func TestEngineRefusalIsNotShown(t *testing.T) {
	v := afterFailedStart(t, "example/any:1", func(container.Spec) error {
		return errors.New("runtime: create container from rarecloud/sandbox-python:latest: Error response from daemon: Range of CPUs is from 0.01 to 1.00, as there are only 1 CPUs available")
	})
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

// A program the image lacks ends the sandbox start_failed with the
// runtime's words naming it, which the owner can act on.
func TestMissingProgramIsNamed(t *testing.T) {
	// As the Docker runtime reports a run-mode program its image lacks.
	v := afterFailedStart(t, "example/any:1", func(container.Spec) error {
		return &container.StartRefusedError{Msg: `its program "/nope" is not in image example/any:1`, Err: errors.New("Error response from daemon: OCI runtime start failed")}
	})
	want := `the sandbox could not start: its program "/nope" is not in image example/any:1`
	if v.Status != StatusTerminated || v.TerminationReason != ReasonStartFailed || v.TerminationMessage != want {
		t.Fatalf("sandbox %s: %s, %q, %q; want terminated, start_failed, %q", v.ID, v.Status, v.TerminationReason, v.TerminationMessage, want)
	}
}
