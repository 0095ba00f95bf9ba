package sandbox

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Host capacity: besides each account's vCPU limit (capacity.go), the
// memory limits of every live sandbox of this backend, whatever its
// account, must fit what the machine holds, and no account may hold more
// than its share of that. A sandbox's memory limit bounds what it can take
// from the host: under gVisor its tmpfs mounts (/home/user, /tmp, image
// volumes) are held in the sandbox's own memory and count against that
// same limit (measured: 600 MB written to a 1 GB tmpfs of a 256 MB sandbox
// killed it with 137). Each sandbox is counted at its template's memory
// plus sandboxOverhead for gVisor itself.
//
// The capacity is (host memory - HostMemoryReserve) x MemoryOvercommit. At
// an overcommit of 1 the sandboxes cannot take the host's memory however
// much of their limits they use; above 1 the operator trades that for
// density (an idle sandbox uses a few tens of MB of its limit). The test
// mode runs nothing and is not counted.

// Defaults of the host capacity settings.
const (
	DefaultHostMemoryReserve = 2 << 30
	DefaultMemoryOvercommit  = 4
	DefaultHostShare         = 0.5
	// sandboxOverhead is what gVisor's sentry and gofer take beside a
	// sandbox's own memory.
	sandboxOverhead = 64 << 20
)

// CodeHostShareExceeded: the account holds its share of the host's
// sandbox memory (409, like its vCPU limit: its own sandboxes are what to
// delete). CodeHostCapacityExhausted: the host has no memory left for
// the sandbox, whoever holds it (503, with Retry-After).
const (
	CodeHostShareExceeded     = "HOST_SHARE_EXCEEDED"
	CodeHostCapacityExhausted = "HOST_CAPACITY_EXHAUSTED"
)

// hostCapacityRetry is the Retry-After of that answer, in seconds.
const hostCapacityRetry = 30

// hostMemory reads MemTotal from /proc/meminfo; 0 when it cannot.
func hostMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// hostCapacity is the memory the live sandboxes may hold together; 0
// means no bound (the host's memory is unknown).
func (m *Manager) hostCapacity() int64 {
	free := m.cfg.HostMemoryBytes - m.cfg.HostMemoryReserve
	if m.cfg.HostMemoryBytes <= 0 || free <= 0 {
		return 0
	}
	return int64(float64(free) * m.cfg.MemoryOvercommit)
}

func (m *Manager) sandboxMemory(sb *store.Sandbox) int64 {
	return m.templates[sb.Template].MemoryMB<<20 + sandboxOverhead
}

// checkHostCapacityLocked refuses a sandbox of tpl for account when the
// host has no room for it: the data directory's disk below its reserve
// (diskcap.go), the live sandboxes' memory past the host's capacity or the
// account's share of it, or no sandbox address left (addresses below). It
// runs under the lock that inserts the record, like the vCPU check, and
// does no I/O.
func (m *Manager) checkHostCapacityLocked(account string, tpl Template) *Error {
	if err := m.checkDiskLocked(); err != nil {
		return err // records are written in both modes
	}
	if m.immediate {
		return nil // the test mode runs nothing: no memory, no address
	}
	use := m.hostUseLocked(account)
	if err := m.checkMemoryLocked(account, tpl, use); err != nil {
		return err
	}
	return m.checkAddressesLocked(account, use)
}

// hostUse is what the live sandboxes of this backend hold, and the part of
// it the asking account holds.
type hostUse struct {
	memAll, memMine int64
	// live and mine count pending and running sandboxes; held the other
	// containers of this backend that hold an address: warm ones (ready
	// or starting) and those of deleted sandboxes still being removed.
	live, mine, held int
}

func (m *Manager) hostUseLocked(account string) hostUse {
	u := hostUse{memAll: m.live.mem, live: m.live.count}
	if a := m.accounts[account]; a != nil {
		u.memMine, u.mine = a.live.mem, a.live.count
	}
	for _, p := range m.pools {
		u.held += len(p.ready) + p.filling
	}
	u.held += len(m.removing)
	return u
}

func (m *Manager) checkMemoryLocked(account string, tpl Template, u hostUse) *Error {
	capacity := m.hostCapacity()
	if capacity == 0 {
		return nil
	}
	need := tpl.MemoryMB<<20 + sandboxOverhead
	all, mine := u.memAll, u.memMine
	share := int64(float64(capacity) * m.cfg.HostShare)
	switch {
	case mine+need > share:
		return &Error{Code: CodeHostShareExceeded, Message: fmt.Sprintf(
			"account %s holds %s of this host's sandbox memory, its share (%.0f%% of %s); a %s sandbox needs %s more. Delete sandboxes you no longer need (capacity frees at once)",
			account, fmtBytes(mine), m.cfg.HostShare*100, fmtBytes(capacity), tpl.Name, fmtBytes(need))}
	case all+need > capacity:
		return &Error{Code: CodeHostCapacityExhausted, RetryAfter: hostCapacityRetry, Message: fmt.Sprintf(
			"this host's sandbox memory is taken: live sandboxes hold %s of %s and a %s sandbox needs %s more. Retry in a while (sandboxes end and free it)",
			fmtBytes(all), fmtBytes(capacity), tpl.Name, fmtBytes(need))}
	}
	return nil
}

// Addresses: every sandbox on the sandbox network holds one address on it
// from the pool the backend leases from (Config.Addresses: the subnet
// outside the engine's range, 191 addresses on the network make setup
// makes, egress-restricted sandboxes' included). A create past the pool
// would only end start_failed once its container found none, so it is
// refused instead, counting every live sandbox of this backend and every
// other container of it that holds one (warm containers, containers of
// deleted sandboxes not yet removed), and one account may hold at most its
// HostShare of the pool. Other backends on the same network draw from the
// same pool: the leases every backend holds are sampled off the lock
// (Config.NetworkLeases, at most leaseSampleAge old), and the pool counts
// as taken up to the larger of the two. That never refuses a create there
// is room for (this backend's own count is at least its leases), and
// refuses one that other backends' leases leave no room for; what it
// cannot see are other backends' starts that have not leased yet.

// leaseSampleAge is how old the sample of the network's leases may be.
const leaseSampleAge = 250 * time.Millisecond

func newNetworkLeases(read func() (int, error), log *slog.Logger) *sampler {
	return newSampler(func() (int64, error) { n, err := read(); return int64(n), err }, leaseSampleAge, func(err error) {
		log.Warn("the sandbox network's leases cannot be read; creates count only this backend's addresses until they can", "err", err)
	})
}

func (m *Manager) checkAddressesLocked(account string, u hostUse) *Error {
	pool := m.cfg.Addresses
	if pool <= 0 {
		return nil
	}
	share := int(float64(pool) * m.cfg.HostShare)
	ours := u.live + u.held
	taken, others := ours, 0
	if m.leases != nil {
		if n, ok := m.leases.sample(); ok && int(n) > ours {
			taken, others = int(n), int(n)-ours
		}
	}
	switch {
	case u.mine+1 > share:
		return &Error{Code: CodeHostShareExceeded, Message: fmt.Sprintf(
			"account %s holds %d of this host's %d sandbox addresses, its share (%.0f%%). Delete sandboxes you no longer need (their addresses free at once)",
			account, u.mine, pool, m.cfg.HostShare*100)}
	case taken+1 > pool && others > 0:
		return &Error{Code: CodeHostCapacityExhausted, RetryAfter: hostCapacityRetry, Message: fmt.Sprintf(
			"this host's sandbox addresses are taken: %d of %d addresses on the sandbox network are leased, %d of them by other backends on this host (this one holds %d for live sandboxes and %d for other containers). Retry in a while (sandboxes end and free them)",
			taken, pool, others, u.live, u.held)}
	case taken+1 > pool:
		return &Error{Code: CodeHostCapacityExhausted, RetryAfter: hostCapacityRetry, Message: fmt.Sprintf(
			"this host's sandbox addresses are taken: %d live sandboxes and %d other containers hold %d of %d addresses on the sandbox network. Retry in a while (sandboxes end and free them)",
			u.live, u.held, u.live+u.held, pool)}
	}
	return nil
}

func fmtBytes(b int64) string {
	return strconv.FormatFloat(float64(b)/(1<<30), 'f', 1, 64) + " GiB"
}
