package sandbox

import (
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"
)

// Disk: records, run-mode logs and idempotency answers are written to the
// data directory, and in test mode the containers' files too. A create is
// refused (503 HOST_CAPACITY_EXHAUSTED, naming the disk) while the file
// system of the data directory has less free space than Config.DiskReserve,
// so that the sandboxes already running can still have their records
// written, and the host its disk. Images are bounded apart, on the engine
// (Config.ImageBudgetBytes of the backend).
//
// The free space is sampled off the lock (sampler.go): a statfs that
// hangs holds up no create and no other sandbox.

// DefaultDiskReserve is the free space a create leaves to the host's disk.
const DefaultDiskReserve = 1 << 30

const diskSampleAge = time.Second

// FreeSpace is the space, in bytes, that unprivileged writes may still use
// on the file system holding dir (statfs's f_bavail).
func FreeSpace(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// newDiskSpace samples the free space of the data directory (sampler.go).
func newDiskSpace(dir string, free func(string) (int64, error), log *slog.Logger) *sampler {
	return newSampler(func() (int64, error) { return free(dir) }, diskSampleAge, func(err error) {
		log.Warn("the data directory's free space cannot be read; creates are not bounded by --disk-reserve until it can", "dir", dir, "err", err)
	})
}

// checkDiskLocked refuses a create while the data directory's file
// system has less free space than the reserve. A file system whose free
// space cannot be read is not refused for it.
func (m *Manager) checkDiskLocked() *Error {
	if m.cfg.DiskReserve <= 0 || m.diskSpace == nil {
		return nil
	}
	avail, ok := m.diskSpace.sample()
	if !ok || avail >= m.cfg.DiskReserve {
		return nil
	}
	return &Error{Code: CodeHostCapacityExhausted, RetryAfter: hostCapacityRetry, Message: fmt.Sprintf(
		"this host's disk is nearly full: the file system of the backend's data directory has %s free, less than the %s it keeps free (--disk-reserve). Retry in a while, once space is freed",
		fmtMiB(avail), fmtMiB(m.cfg.DiskReserve))}
}

func fmtMiB(b int64) string {
	if b >= 1<<30 {
		return fmtBytes(b)
	}
	return fmt.Sprintf("%d MiB", b>>20)
}
