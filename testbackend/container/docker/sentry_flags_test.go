package docker

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSentryRunsWithoutTheFastPath: a sandbox's sentry runs on systrap
// with the fast path off, as setup's runtime starts it: the fast path
// spins while the sentry waits, which spends the CPU quota that holds the
// sandbox to its vCPUs.
func TestSentryRunsWithoutTheFastPath(t *testing.T) {
	d := requireEngine(t, Options{Network: NetworkNone})
	id := start(t, d, testSpec(t))
	info, err := d.cli.ContainerInspect(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	args := sentryArgs(t, info.ID)
	if args == nil {
		t.Fatalf("no runsc-sandbox process names container %s", info.ID)
	}
	for _, want := range []string{"--platform=systrap", "--systrap-disable-fast-path=true"} {
		if !slices.Contains(args, want) {
			t.Errorf("the sentry runs without %s: %q", want, args)
		}
	}
}

// sentryArgs is the command line of the runsc-sandbox process that names
// the container whose full id is id, nil when there is none.
func sentryArgs(t *testing.T, id string) []string {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.HasPrefix(b, []byte("runsc-sandbox\x00")) {
			continue // gone, or another process
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, id) }) {
			return args
		}
	}
	return nil
}
