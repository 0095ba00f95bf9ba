package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// laterRuntime answers every ensure as a runtime that will not start the
// pull now, and records the account each ensure was marked with.
type laterRuntime struct {
	gateRuntime
	later *container.PullLaterError // nil: the image is there

	mu       sync.Mutex
	accounts []string
}

func (r *laterRuntime) EnsureImage(ctx context.Context, ref string) error {
	r.mu.Lock()
	r.accounts = append(r.accounts, container.PullAccountOf(ctx))
	r.mu.Unlock()
	if r.later == nil {
		return nil
	}
	return fmt.Errorf("runtime: ensure %s: %w", ref, r.later)
}

func (r *laterRuntime) ensured() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.accounts...)
}

// A pull the runtime will not start now is the create's answer at once,
// with the runtime's message and Retry-After: 429 for the account's own
// second pull, 503 for a full image store; no sandbox is made.
func TestCreatePullLater(t *testing.T) {
	for _, c := range []struct {
		perAccount bool
		retry      time.Duration
		code       string
		after      int
	}{
		{true, 5 * time.Second, CodeTooManyRequests, 5},
		{false, 1500 * time.Millisecond, CodeHostCapacityExhausted, 2},
	} {
		t.Run(c.code, func(t *testing.T) {
			msg := "retry image \"example/other:1\" in a while: " + c.code
			rt := &laterRuntime{later: &container.PullLaterError{Image: "example/other:1", PerAccount: c.perAccount, RetryAfter: c.retry, Msg: msg}}
			m := newManager(t, rt, ModeReal, t.TempDir())
			_, err := m.Create(context.Background(), "acct", "", CreateRequest{Image: "example/other:1"})
			var e *Error
			if !errors.As(err, &e) || e.Code != c.code || e.RetryAfter != c.after || e.Message != msg {
				t.Fatalf("create: %#v, want %s, Retry-After %d, the runtime's message", err, c.code, c.after)
			}
			if list := m.List("acct", nil); len(list) != 0 {
				t.Fatalf("a refused create left sandboxes: %+v", list)
			}
		})
	}
}

// An account admission would refuse is refused before its image is
// ensured: a pull costs the host, and the create would be refused after
// it anyway. An account with room has its ensure marked as its own, so
// the runtime counts the pull against it.
func TestAdmitImageRefusesAccountBeforePull(t *testing.T) {
	rt := &laterRuntime{}
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, AccountVCPULimits: map[string]float64{"full": 0.5}}, t.TempDir())
	req := CreateRequest{Image: "example/app:1"}
	tpl, verr := m.validate(&req)
	if verr != nil {
		t.Fatal(verr)
	}
	_, err := m.admitImageFor(context.Background(), "full", tpl, req)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeVCPULimitExceeded {
		t.Fatalf("admit for an account at its vCPU limit: %v, want %s", err, CodeVCPULimitExceeded)
	}
	if got := rt.ensured(); len(got) != 0 {
		t.Fatalf("the refused account's image was ensured (%q)", got)
	}
	image, err := m.admitImageFor(context.Background(), "roomy", tpl, req)
	if err != nil || image != "example/app:1" {
		t.Fatalf("admit for an account with room: %q, %v", image, err)
	}
	if got := rt.ensured(); len(got) != 1 || got[0] != "roomy" {
		t.Fatalf("ensures marked %q, want one, marked roomy", got)
	}
}
