package apitest

import "strings"

// MemoryStop says how a program that allocates past its sandbox's memory
// was stopped, from its result: ok is false when the result shows another
// end (it finished, timed out, or failed for some other reason).
//
// Under gVisor (systrap, cgroup v1) the host kernel enforces the limit on
// the pages the sandbox holds, and a single program over it is stopped in
// one of three ways:
//   - killed (137), the usual way here: the kernel's OOM killer killed its
//     systrap stub;
//   - a segmentation fault (139), seen once in CI (2026-12-07) with no
//     output: as far as can be told, a page it touched that gVisor could
//     not back while the OOM killer was at work;
//   - MemoryError: the allocation itself was refused, and Python says so.
func MemoryStop(res ExecResult) (mechanism string, ok bool) {
	switch {
	case res.ExitCode == nil || *res.ExitCode == 0 || res.TimedOut:
		return "", false
	case *res.ExitCode == 137:
		return "killed with SIGKILL (OOM)", true
	case *res.ExitCode == 139:
		return "SIGSEGV on a page that could not be backed", true
	case strings.Contains(res.Stderr, "MemoryError"):
		return "MemoryError", true
	}
	return "", false
}
