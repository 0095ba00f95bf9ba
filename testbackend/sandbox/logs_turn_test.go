package sandbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// logsTurnRuntime holds file reads as transferRuntime does and reports
// each log read that reaches it, with the pace it was given.
type logsTurnRuntime struct {
	*transferRuntime
	logsIn chan container.Pacer
}

func (r *logsTurnRuntime) Logs(_ context.Context, _ string, _ int, pace container.Pacer) ([]byte, error) {
	r.logsIn <- pace
	return []byte("out\n"), nil
}

// TestRunningLogsTakeTheTransferTurn: reading a running program's logs
// makes the engine read its whole log, up to the log driver's 16 MiB, so
// it is a transfer like a file read: while another account is on the
// host it waits for its account's turn and moves at the account's pace.
// An account alone reads them at once, beside its own file read (the
// positive control that the test sees a read go in).
func TestRunningLogsTakeTheTransferTurn(t *testing.T) {
	rt := &logsTurnRuntime{transferRuntime: newTransferRuntime(), logsIn: make(chan container.Pacer, 8)}
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, TransferWait: time.Hour}, t.TempDir())
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := m.Create(ctx, "a", "", CreateRequest{Cmd: []string{"sh", "-c", "echo out; sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	job := res.Sandbox.ID
	waitRunning(ctx, t, m, "a", job)
	files := runningOf(ctx, t, m, "a", "base")
	readHeld := func() {
		t.Helper()
		wg.Go(func() { _, _ = m.ReadFile(ctx, "a", files, "/home/user/f") })
		select {
		case <-rt.entered:
		case <-ctx.Done():
			t.Fatal("the file read did not reach the runtime")
		}
	}
	logs := func() <-chan error {
		done := make(chan error, 1)
		wg.Go(func() {
			_, err := m.Logs(ctx, "a", job)
			done <- err
		})
		return done
	}

	// Alone on the host: the log read goes in beside the file read.
	readHeld()
	first := logs()
	select {
	case <-rt.logsIn:
	case <-ctx.Done():
		t.Fatal("an account alone on the host: its log read waited for its file read")
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	rt.gate(containerOf(t, m, files)) <- struct{}{}

	// Another account on the host: the log read waits for the file read.
	runningOf(ctx, t, m, "b", "base")
	readHeld()
	second := logs()
	// Waiting for something not to happen needs a bound: a read let
	// through goes in within microseconds, far below it.
	select {
	case <-rt.logsIn:
		t.Fatal("a log read went in while its account's file read held the turn")
	case <-time.After(200 * time.Millisecond):
	}
	rt.gate(containerOf(t, m, files)) <- struct{}{}
	select {
	case pace := <-rt.logsIn:
		if pace == nil {
			t.Error("the log read went in without the account's pace")
		}
	case <-ctx.Done():
		t.Fatal("the log read did not go in once the file read ended")
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
}
