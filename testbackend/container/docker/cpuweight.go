package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// A container's CPU weight is written to its cgroup's file directly. The
// engine's update call would do it too, but it runs the runtime's update
// command for each container (76 ms of host CPU an update, measured on a
// 2-core machine on 2026-12-05), and the sandbox manager changes the
// weights of all of an account's sandboxes together. The file is found
// once per container, from the cgroup the kernel lists for its main
// process, and forgotten when the container is removed.

var _ container.CPUWeigher = (*Runtime)(nil)

// SetCPUWeight sets a running container's CPU weight (container.CPUWeigher).
func (d *Runtime) SetCPUWeight(ctx context.Context, id string, weight int) error {
	if weight < container.MinCPUWeight || weight > container.MaxCPUWeight {
		return fmt.Errorf("runtime: CPU weight %d is outside %d to %d", weight, container.MinCPUWeight, container.MaxCPUWeight)
	}
	return d.writeCPUCgroup(ctx, id, "CPU weight", func(file cpuWeightFile) error { return writeWeight(file, weight) })
}

// writeCPUCgroup runs write on the container's CPU cgroup, found once
// (cpuWeightFile); a cgroup gone with its container is ErrNotFound.
func (d *Runtime) writeCPUCgroup(ctx context.Context, id, what string, write func(cpuWeightFile) error) error {
	file, err := d.cpuWeightFile(ctx, id)
	if err != nil {
		return err
	}
	err = write(file)
	if errors.Is(err, fs.ErrNotExist) {
		d.forgetCPUWeight(id) // the container went: its cgroup with it
		return fmt.Errorf("%w: %s", container.ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("runtime: set the %s of container %s: %w", what, id, err)
	}
	return nil
}

// writeWeight writes weight (a cgroup v1 share) to a weight file.
func writeWeight(file cpuWeightFile, weight int) error {
	value := weight
	if file.v2 {
		value = weightV2(weight)
	}
	return writeFile(file.path, strconv.Itoa(value))
}

// writeFile writes value to an existing cgroup file.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// weightV2 maps a cgroup v1 share onto cgroup v2's cpu.weight (1 to
// 10000), as the engine and runc map CPU shares.
func weightV2(shares int) int {
	return 1 + (shares-2)*9999/262142
}

// cpuWeightFile is where a container's CPU weight is written.
type cpuWeightFile struct {
	path string
	v2   bool // cpu.weight (cgroup v2) rather than cpu.shares (v1)
}

func (d *Runtime) cpuWeightFile(ctx context.Context, id string) (cpuWeightFile, error) {
	d.weightMu.Lock()
	f, ok := d.weightFiles[id]
	d.weightMu.Unlock()
	if ok {
		return f, nil
	}
	if !strings.HasPrefix(d.host, "unix://") {
		return cpuWeightFile{}, fmt.Errorf("%w: the engine at %s may be on another host", container.ErrCannotWeigh, d.host)
	}
	info, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return cpuWeightFile{}, fmt.Errorf("%w: %s", container.ErrNotFound, id)
		}
		return cpuWeightFile{}, d.containerErr("inspect", id, err)
	}
	if info.State == nil || !info.State.Running || info.State.Pid <= 0 {
		return cpuWeightFile{}, fmt.Errorf("%w: %s", container.ErrNotRunning, id)
	}
	f, err = cgroupCPUFile(info.State.Pid)
	if err == nil {
		err = ownCgroup(f, info.ID)
	}
	if err != nil {
		return cpuWeightFile{}, fmt.Errorf("%w: the CPU cgroup of container %s: %v", container.ErrCannotWeigh, id, err)
	}
	d.weightMu.Lock()
	d.weightFiles[id] = f
	d.weightMu.Unlock()
	d.noteParent(f)
	return f, nil
}

// ownCgroup checks that the cgroup found is the container's own: the
// engine names it after the container's full id (cgroupfs and systemd
// alike). A process of this host with the engine's pid, when the engine
// is elsewhere, is in a cgroup of its own, never weighed.
func ownCgroup(f cpuWeightFile, fullID string) error {
	if fullID == "" || !strings.Contains(filepath.Dir(f.path), fullID) {
		return fmt.Errorf("%s is not the cgroup of container %s", filepath.Dir(f.path), fullID)
	}
	return nil
}

// forgetCPUWeight drops what is known of a removed container's cgroup.
func (d *Runtime) forgetCPUWeight(id string) {
	d.weightMu.Lock()
	delete(d.weightFiles, id)
	d.weightMu.Unlock()
}

// cgroupCPUFile is the CPU weight file of the cgroup process pid is in:
// the cpu controller's under cgroup v1, the unified hierarchy's under v2.
func cgroupCPUFile(pid int) (cpuWeightFile, error) {
	groups, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return cpuWeightFile{}, err
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return cpuWeightFile{}, err
	}
	return cpuFileOf(string(groups), string(mounts))
}

// cpuFileOf finds the weight file from a process's /proc/PID/cgroup and
// this process's /proc/self/mountinfo.
func cpuFileOf(groups, mounts string) (cpuWeightFile, error) {
	var v1, v2 string
	haveV1, haveV2 := false, false
	for _, line := range strings.Split(groups, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2, haveV2 = parts[2], true
		case slices.Contains(strings.Split(parts[1], ","), "cpu"):
			v1, haveV1 = parts[2], true
		}
	}
	var v2Mount, v2Root string
	for _, m := range cgroupMounts(mounts) {
		switch {
		case haveV1 && m.fstype == "cgroup" && slices.Contains(m.opts, "cpu"):
			p, err := under(m.point, m.root, v1)
			return cpuWeightFile{path: filepath.Join(p, "cpu.shares")}, err
		case haveV2 && m.fstype == "cgroup2" && v2Mount == "":
			v2Mount, v2Root = m.point, m.root
		}
	}
	if haveV2 && v2Mount != "" && !haveV1 {
		p, err := under(v2Mount, v2Root, v2)
		return cpuWeightFile{path: filepath.Join(p, "cpu.weight"), v2: true}, err
	}
	return cpuWeightFile{}, errors.New("no mounted cgroup with a cpu controller")
}

// cgroupMount is a mounted cgroup hierarchy, from /proc/self/mountinfo.
type cgroupMount struct {
	root, point, fstype string
	opts                []string // the super options: a v1 hierarchy's controllers
}

// cgroupMounts lists the cgroup and cgroup2 mounts of a mountinfo.
func cgroupMounts(mounts string) []cgroupMount {
	var out []cgroupMount
	sc := bufio.NewScanner(strings.NewReader(mounts))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 5 || len(f) < sep+4 {
			continue
		}
		if fstype := f[sep+1]; fstype == "cgroup" || fstype == "cgroup2" {
			out = append(out, cgroupMount{root: f[3], point: f[4], fstype: fstype, opts: strings.Split(f[sep+3], ",")})
		}
	}
	return out
}

// under is the directory of cgroup path in a hierarchy mounted at point
// whose root is root.
func under(point, root, path string) (string, error) {
	rel, ok := strings.CutPrefix(filepath.Clean(path), filepath.Clean(root))
	if !ok || strings.Contains(path, "..") || (rel != "" && !strings.HasPrefix(rel, "/") && root != "/") {
		return "", fmt.Errorf("cgroup %s is outside the mounted hierarchy %s", path, root)
	}
	return filepath.Join(point, rel), nil
}
