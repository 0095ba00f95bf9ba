package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// refusingRuntime refuses every image as the Docker runtime refuses one
// (container/image_policy.go), wrapped as a runtime error would be.
type refusingRuntime struct {
	gateRuntime
	rule string
}

func (r *refusingRuntime) EnsureImage(_ context.Context, ref string) error {
	return fmt.Errorf("runtime: ensure %s: %w", ref, &container.ImageRefusedError{Image: ref, Rule: r.rule, Msg: "use another image: " + ref + " breaks rule " + r.rule})
}

// A refused image answers its own code with the runtime's message as it is,
// at create, and no sandbox is made.
func TestCreateRefusedImage(t *testing.T) {
	for rule, code := range map[string]string{container.RulePlatform: CodeImagePlatformMismatch, container.RuleVolumes: CodeImageNotAllowed} {
		t.Run(rule, func(t *testing.T) {
			m := newManager(t, &refusingRuntime{rule: rule}, ModeReal, t.TempDir())
			_, err := m.Create(context.Background(), "acct", "", CreateRequest{Image: "example/hostile:1"})
			var e *Error
			if !errors.As(err, &e) || e.Code != code || e.Message != "use another image: example/hostile:1 breaks rule "+rule {
				t.Fatalf("create: %v, want %s with the runtime's message", err, code)
			}
			if list := m.List("acct", nil); len(list) != 0 {
				t.Fatalf("a refused create left sandboxes: %+v", list)
			}
		})
	}
}

// A pull that fails after the create answered ends the sandbox
// terminated, reason start_failed, with the runtime's own message.
func TestPullFailsAfterCreate(t *testing.T) {
	// The image is there at create; pulling it again at start fails, as the
	// Docker runtime's Start reports it.
	v := afterFailedStart(t, "example/gone:1", func(spec container.Spec) error {
		return &container.ImageRefusedError{Image: spec.Image, Rule: container.RulePull, Msg: "image \"" + spec.Image + "\" could not be pulled from its registry; check that it exists and is public"}
	})
	want := `the sandbox could not start: image "example/gone:1" could not be pulled from its registry; check that it exists and is public`
	if v.Status != StatusTerminated || v.TerminationReason != ReasonStartFailed || v.TerminationMessage != want {
		t.Fatalf("sandbox %s: %s, %q, %q; want terminated, start_failed, %q", v.ID, v.Status, v.TerminationReason, v.TerminationMessage, want)
	}
}
