package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// The sandboxes' cgroup parent. Left to the engine, every container's
// cgroup is under the engine's one parent (cgroupfs: "docker"), which
// weighs as one host process against the backend's, the engine's and
// every other process of the host: however the accounts' weights split
// it, all the sandboxes together get one busy host thread's part of a
// contended host. So where the engine's cgroups are on this host and its
// driver is cgroupfs, this runtime puts its containers under a parent of
// its own, CgroupParentPrefix+instance at the root of each hierarchy,
// whose weight the sandbox manager sets (SetTotalCPUWeight). Close
// removes the parent once it is empty; the reaper removes those of
// instances that are gone (RemoveCgroupParent). Under the systemd driver
// the parent is a slice that systemd owns: the engine's default stays,
// and SetTotalCPUWeight says it cannot weigh.

// CgroupParentPrefix begins the name of each runtime's own cgroup parent.
const CgroupParentPrefix = "rarecloud-"

// engineCgroupfs is the engine's cgroup driver that takes a parent path.
const engineCgroupfs = "cgroupfs"

// cgroupParentName is the name of instance's own cgroup parent.
func cgroupParentName(instance string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, instance)
	if len(clean) > 64 {
		clean = clean[:64]
	}
	return CgroupParentPrefix + clean
}

// cgroupParent is the parent the engine is asked to put a new container
// under: this runtime's own where it can weigh it, else "" (the engine's).
func (d *Runtime) cgroupParent(ctx context.Context) string {
	if !strings.HasPrefix(d.host, "unix://") || d.engineFacts(ctx).cgroupDriver != engineCgroupfs {
		return ""
	}
	return "/" + cgroupParentName(d.instance)
}

// mayOwnParent reports, without asking the engine, whether this runtime
// may have put containers under its own parent.
func (d *Runtime) mayOwnParent() bool {
	d.platformMu.Lock()
	defer d.platformMu.Unlock()
	return strings.HasPrefix(d.host, "unix://") && d.facts.cgroupDriver == engineCgroupfs
}

// SetTotalCPUWeight sets what this runtime's containers weigh together
// against the host's processes (container.CPUWeigher): the weight of its
// own cgroup parent. The parent is found from the first container
// weighed (SetCPUWeight); until then, and after the parent was removed
// (it is made again with the next container, at the kernel's default),
// the weight is kept and given to the parent as soon as a container
// under it is weighed.
func (d *Runtime) SetTotalCPUWeight(ctx context.Context, weight int) error {
	if weight < container.MinCPUWeight || weight > container.MaxCPUWeight {
		return fmt.Errorf("runtime: CPU weight %d is outside %d to %d", weight, container.MinCPUWeight, container.MaxCPUWeight)
	}
	if d.cgroupParent(ctx) == "" {
		return fmt.Errorf("%w together: their cgroups are under the engine's own parent", container.ErrCannotWeigh)
	}
	d.weightMu.Lock()
	d.totalWeight = weight
	f := d.parentWeight
	d.weightMu.Unlock()
	if f.path == "" {
		return nil // given when the first container is weighed (noteParent)
	}
	return d.weighParent(f, weight)
}

// weighParent writes the parent's weight; a parent that is gone is
// forgotten, to be found again from the next container weighed.
func (d *Runtime) weighParent(f cpuWeightFile, weight int) error {
	err := writeWeight(f, weight)
	if errors.Is(err, fs.ErrNotExist) {
		d.weightMu.Lock()
		if d.parentWeight == f {
			d.parentWeight = cpuWeightFile{}
		}
		d.weightMu.Unlock()
		return nil
	}
	if err != nil {
		return fmt.Errorf("runtime: set the CPU weight of the sandboxes' cgroup parent: %w", err)
	}
	return nil
}

// noteParent remembers the weight file of this runtime's own cgroup
// parent from a newly weighed container's, when the container is under
// it, and gives the parent the weight last asked for: a parent made
// again (removed meanwhile, by the reaper or by hand) starts at the
// kernel's default.
func (d *Runtime) noteParent(f cpuWeightFile) {
	parent := filepath.Dir(filepath.Dir(f.path))
	if filepath.Base(parent) != cgroupParentName(d.instance) {
		return
	}
	pf := cpuWeightFile{path: filepath.Join(parent, filepath.Base(f.path)), v2: f.v2}
	d.weightMu.Lock()
	d.parentWeight = pf
	w := d.totalWeight
	d.weightMu.Unlock()
	if w > 0 {
		_ = d.weighParent(pf, w) // on failure the kernel's default stays until the weight is set again
	}
}

// removeLeftCgroups removes what the engine left of a removed
// container's cgroups under this runtime's own parent: its runtime
// leaves them when the container's start failed (measured on 2026-12-05:
// a run-mode program that does not exist left one in every hierarchy),
// and each is a kernel object an account could otherwise pile up at the
// rate of its creates. The sandbox's processes may still be leaving them
// when the removal returns, so the cgroups are removed in the background
// as soon as they are empty (rmdir takes only a cgroup without
// processes), for at most leftCgroupWait. Only for a full container id.
func (d *Runtime) removeLeftCgroups(id string) {
	if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" || !d.mayOwnParent() {
		return
	}
	all, err := cgroupDirs("/" + cgroupParentName(d.instance) + "/" + id)
	if err != nil {
		return
	}
	var dirs []string
	for _, dir := range all {
		if os.Remove(dir) != nil {
			if _, err := os.Stat(dir); err == nil {
				dirs = append(dirs, dir)
			}
		}
	}
	if len(dirs) == 0 {
		return // the usual case: the engine's runtime removed them
	}
	go func() {
		deadline := time.Now().Add(leftCgroupWait)
		for len(dirs) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			dirs = slices.DeleteFunc(dirs, func(dir string) bool {
				err := os.Remove(dir)
				return err == nil || errors.Is(err, fs.ErrNotExist)
			})
		}
	}()
}

// leftCgroupWait bounds how long a removed container's cgroups are
// waited for to be empty.
const leftCgroupWait = 30 * time.Second

// RemoveCgroupParent removes instance's own cgroup parent from every
// mounted cgroup hierarchy where it is empty. With leftovers, the
// container cgroups inside it that hold no process go first (a crashed
// engine leaves them behind): only for an instance that is gone for good
// (the reaper holds its lease and removed its containers), since a live
// instance's new container may be between its cgroup's making and its
// first process.
func RemoveCgroupParent(instance string, leftovers bool) error {
	dirs, err := cgroupDirs("/" + cgroupParentName(instance))
	if err != nil {
		return err
	}
	var errs []error
	for _, dir := range dirs {
		if leftovers {
			children, _ := os.ReadDir(dir)
			for _, c := range children {
				if c.IsDir() {
					_ = os.Remove(filepath.Join(dir, c.Name())) // rmdir: only without processes or children
				}
			}
		}
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EBUSY) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cgroupDirs is where cgroup path is in every cgroup hierarchy mounted
// here, whether or not it exists; a hierarchy whose root is below path
// holds no part of it and is left out.
func cgroupDirs(path string) ([]string, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, m := range cgroupMounts(string(mounts)) {
		if dir, err := under(m.point, m.root, path); err == nil {
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}
