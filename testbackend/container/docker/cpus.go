package docker

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"
)

// A sandbox's CPU limit is its template's vCPUs, but the engine refuses a
// limit above the CPUs it may use itself ("Range of CPUs is from 0.01 to
// 1.00"), and a sandbox could not use more anyway: on a host with fewer
// CPUs than a template's vCPUs, the limit is the host's CPUs. The API
// still reports the template's vCPUs, which the account's limit counts.

// EngineCPUs is how many CPUs the engine may use (its NCPU, asked once),
// or 0 when it does not say.
func (d *Runtime) EngineCPUs(ctx context.Context) int {
	return d.engineFacts(ctx).ncpu
}

// engineFacts is what the engine's Info says that this runtime uses.
type engineFacts struct {
	ncpu         int    // the CPUs it may use, 0: it did not say
	cgroupDriver string // "cgroupfs" or "systemd"
}

// engineFacts asks the engine's Info once it answers; until then each
// call asks again, and gets the zero facts when it does not answer.
func (d *Runtime) engineFacts(ctx context.Context) engineFacts {
	d.platformMu.Lock()
	f := d.facts
	d.platformMu.Unlock()
	if f.ncpu > 0 {
		return f
	}
	info, err := d.cli.Info(ctx)
	if err != nil || info.NCPU <= 0 {
		return engineFacts{} // the create answers what the engine thinks of the limit
	}
	f = engineFacts{ncpu: info.NCPU, cgroupDriver: info.CgroupDriver}
	d.platformMu.Lock()
	d.facts = f
	d.platformMu.Unlock()
	return f
}

// cpuLimit is the limit a container gets for nano (1e-9 CPUs) on an
// engine with cpus CPUs (0: unknown, nano as it is).
func cpuLimit(nano int64, cpus int) int64 {
	if most := int64(cpus) * 1e9; cpus > 0 && nano > most {
		return most
	}
	return nano
}

// cpuPeriod is the CFS period of a sandbox's CPU quota. The engine's
// default (100 ms, what NanoCPUs gets) lets a sandbox whose gVisor
// threads run on every CPU spend its quota in half a period and then
// stops the whole sandbox, its agent included, for the rest: about 50 ms
// at a time, the quiet p99 of a command. A 10 ms period keeps the same
// limit on average and makes each stop at most 10 ms (measured in
// results/README.md#hostile-neighbour; TestCPULimit).
const cpuPeriod = 10 * time.Millisecond

// The kernel's bounds of a CFS quota and period (µs).
const (
	minQuota  = 1000
	maxPeriod = 1000000
)

// cpuQuota is the CFS period and quota (µs) for nano (1e-9 CPUs). A limit
// under a tenth of a CPU (an account's share of the host split over many
// sandboxes, weights.go in package sandbox) would be under the kernel's
// least quota in a 10 ms period: its period grows instead, up to the
// kernel's most, 1 s, so that the quota is its limit's part of it.
func cpuQuota(nano int64) (period, quota int64) {
	period = cpuPeriod.Microseconds()
	if nano > 0 && nano*period/1e9 < minQuota {
		period = min(maxPeriod, (minQuota*1e9+nano-1)/nano)
	}
	return period, max(nano*period/1e9, minQuota)
}

// SetCPULimit sets a running container's CPU limit
// (container.CPUWeigher), written to its cgroup's files beside its
// weight's, as SetCPUWeight does and for the same reason.
func (d *Runtime) SetCPULimit(ctx context.Context, id string, nano int64) error {
	if nano <= 0 {
		return fmt.Errorf("runtime: CPU limit %d is not positive", nano)
	}
	nano = cpuLimit(nano, d.EngineCPUs(ctx))
	return d.writeCPUCgroup(ctx, id, "CPU limit", func(file cpuWeightFile) error {
		return writeLimit(filepath.Dir(file.path), file.v2, nano)
	})
}

// writeLimit writes the quota for nano into the cgroup directory dir:
// cgroup v2's cpu.max, or v1's period and then its quota.
func writeLimit(dir string, v2 bool, nano int64) error {
	period, quota := cpuQuota(nano)
	if v2 {
		return writeFile(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, period))
	}
	if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.FormatInt(period, 10)); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10))
}
