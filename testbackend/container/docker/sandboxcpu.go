package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// SandboxesCPU is the CPU time the containers of instance have used
// together, those already removed included, as the kernel accounts it in
// the instance's own cgroup parent (the engine's cgroupfs driver on this
// host): cgroup v1's cpuacct.usage or v2's usage_usec in cpu.stat. The
// host's busy time less this is what ran outside every sandbox's limit
// (the backend, the engine, the runtime's calls), which the bench reports
// beside a loaded run. An error when no hierarchy holds the parent's
// accounting (no container of the instance started under it yet, or
// another cgroup driver).
func SandboxesCPU(instance string) (time.Duration, error) {
	return cgroupCPU("/" + cgroupParentName(instance))
}

// cgroupCPU is the CPU time charged to the cgroup at path and its
// descendants, from the first hierarchy mounted here that accounts it.
func cgroupCPU(path string) (time.Duration, error) {
	dirs, err := cgroupDirs(path)
	if err != nil {
		return 0, err
	}
	for _, dir := range dirs {
		if used, ok, err := cgroupCPUUsage(dir); ok || err != nil {
			return used, err
		}
	}
	return 0, fmt.Errorf("runtime: no CPU accounting for cgroup %s", path)
}

// cgroupCPUUsage reads the CPU time charged to the cgroup directory dir
// and its descendants; ok is false when dir holds no such accounting (a
// v1 hierarchy without cpuacct, whose cpu.stat counts only throttling).
func cgroupCPUUsage(dir string) (used time.Duration, ok bool, err error) {
	if b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage")); err == nil {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, true, fmt.Errorf("runtime: %s/cpuacct.usage: %w", dir, err)
		}
		return time.Duration(ns), true, nil
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("runtime: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, "usage_usec "); found {
			us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, true, fmt.Errorf("runtime: %s/cpu.stat: %w", dir, err)
			}
			return time.Duration(us) * time.Microsecond, true, nil
		}
	}
	return 0, false, nil
}
