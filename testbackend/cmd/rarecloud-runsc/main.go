// Command rarecloud-runsc is the OCI runtime the sandbox engine names: it
// runs the runsc installed beside it, with its flags (runscFlags), after one edit
// to a container's spec on create. A container for which the backend
// prepared a network namespace (ocispec.NetnsDir/<container id>, wired to the
// sandbox bridge) joins it instead of a new, empty one,
// so the engine never sets up a network for it (its libnetwork re-executions
// and prestart hook cost about half a CPU-second per sandbox on this kind of
// machine). A container whose spec mounts an agent channel's directory
// (ocispec.WantsChannel) is created with runsc's --host-uds=open, so that
// its agent can connect to the backend's socket there. Every other call,
// and every other container, passes through unchanged. The engine's runtime is a shell script setup writes
// (rarecloud-runtime), which runs this program for "create" calls only and
// runsc directly for the rest: per call, this program added 8.6-11.5 ms of
// CPU to runsc's own here, the shell script 3.2-3.9 ms (2026-12-02).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/ocispec"
)

// runscFlags are the flags of every runsc call, the same as setup's
// RC_RUNSC_FLAGS for the calls that do not pass through here: the platform
// every sandbox runs on, without systrap's fast path, whose spinning spends
// the CPU quota that holds each sandbox to its vCPUs (gVisor turns it off
// itself on one CPU).
var runscFlags = []string{"--platform=systrap", "--systrap-disable-fast-path"}

func main() {
	self, err := os.Executable()
	if err != nil {
		fail("cannot find its own path: %v", err)
	}
	runsc := filepath.Join(filepath.Dir(self), "runsc")
	args := os.Args[1:]
	argv := append([]string{runsc}, runscFlags...)
	if bundle, id, ok := ocispec.CreateCall(args); ok {
		spec := filepath.Join(bundle, "config.json")
		if err := ocispec.JoinPreparedNetns(spec, id); err != nil {
			fail("%v", err)
		}
		channel, err := ocispec.WantsChannel(spec)
		if err != nil {
			fail("%v", err)
		}
		if channel {
			argv = append(argv, ocispec.HostUDSFlag)
		}
	}
	argv = append(argv, args...)
	if err := syscall.Exec(runsc, argv, os.Environ()); err != nil {
		fail("exec %s: %v", runsc, err)
	}
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "rarecloud-runsc: "+format+"\n", a...)
	os.Exit(1)
}
