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
