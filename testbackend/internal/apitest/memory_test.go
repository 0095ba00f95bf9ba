package apitest

import (
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// TestMemoryStop: the three ways a program over its memory is stopped
// count, and no other end does (139 was seen once in CI and cannot be
// produced on demand, hence this table).
func TestMemoryStop(t *testing.T) {
	code := func(n int) *int { return &n }
	for _, tc := range []struct {
		out  sandbox.ExecOutput
		want bool
	}{
		{sandbox.ExecOutput{ExitCode: code(137)}, true},
		{sandbox.ExecOutput{ExitCode: code(139)}, true},
		{sandbox.ExecOutput{ExitCode: code(1), Stderr: "Traceback …\nMemoryError\n"}, true},
		{sandbox.ExecOutput{ExitCode: code(0)}, false},
		{sandbox.ExecOutput{ExitCode: code(1), Stderr: "ValueError"}, false},
		{sandbox.ExecOutput{ExitCode: code(137), TimedOut: true}, false},
		{sandbox.ExecOutput{ExitCode: code(135)}, false},
		{sandbox.ExecOutput{}, false},
	} {
		if _, ok := MemoryStop(ExecResult{tc.out}); ok != tc.want {
			t.Errorf("%v: stopped for memory %v, want %v", ExecResult{tc.out}, ok, tc.want)
		}
	}
}
