package docker

import (
	"context"
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

// cpuQuota is the CFS period and quota (µs) for nano (1e-9 CPUs).
func cpuQuota(nano int64) (period, quota int64) {
	period = cpuPeriod.Microseconds()
	return period, max(nano*period/1e9, 1000) // the kernel's least quota is 1 ms
}
