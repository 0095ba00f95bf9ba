package instance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/egress"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Reap removes the containers of backends that are gone for good:
// their lease is not held (no backend runs) and the data directory it
// names no longer exists (no backend can start again on their records), or
// the backend was ephemeral (a test run's shared backend, never restarted).
// Containers of a live backend (lease held), of a backend that may start
// again (data directory present) and of instances without a lease (made
// before leases existed, or the lease directory was cleared) are left
// alone; `make teardown` removes those. It returns how many containers it
// removed.
func Reap(ctx context.Context, d *docker.Runtime, logger *slog.Logger) (int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	others, err := d.OtherInstances(ctx)
	if err != nil {
		return 0, err
	}
	// Leases without containers are swept too, so the directory does not
	// grow with every test run.
	if entries, err := os.ReadDir(Dir); err == nil {
		for _, e := range entries {
			if inst, ok := strings.CutSuffix(e.Name(), ".lock"); ok {
				if _, seen := others[inst]; !seen {
					others[inst] = nil
				}
			}
		}
	}
	removed := 0
	var errs []error
	for inst, ids := range others {
		n, err := reapInstance(ctx, d, inst, ids)
		removed += n
		if err != nil {
			errs = append(errs, err)
		}
		if n > 0 {
			logger.Info("reaped the containers of a backend that is gone", "instance", inst, "containers", n)
		}
	}
	// The egress tables of instances that are not running and have no
	// container left: their sets name addresses that other sandboxes may
	// be given now, and their DNS redirect points at a forwarder that is
	// gone. A stopped instance that still has containers keeps its table,
	// so its sandboxes stay held until it starts again or is reaped.
	left, err := d.OtherInstances(ctx)
	if err != nil {
		errs = append(errs, err)
	} else if n, err := reapEgressTables(ctx, left); err != nil {
		errs = append(errs, err)
	} else if n > 0 {
		logger.Info("removed the egress tables of backends that are gone", "tables", n)
	}
	// The network wiring of containers that are gone, whoever made them.
	if n, err := d.SweepNetworks(ctx); err != nil {
		errs = append(errs, err)
	} else if n > 0 {
		logger.Info("removed the network wiring of containers that are gone", "count", n)
	}
	return removed, errors.Join(errs...)
}

// reapInstance removes one dead instance's containers and its lease while
// holding the lease, so that nothing starts on that instance meanwhile.
func reapInstance(ctx context.Context, d *docker.Runtime, inst string, ids []docker.Owned) (int, error) {
	path := filepath.Join(Dir, inst+".lock")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, nil // no lease: not ours to judge
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return 0, nil // alive
	}
	if !sameFile(f, path) {
		return 0, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, nil
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	dir := strings.TrimSpace(lines[0])
	if dir == "" || !filepath.IsAbs(dir) {
		return 0, nil
	}
	ephemeral := len(lines) > 1 && strings.TrimSpace(lines[1]) == leaseEphemeral
	if _, err := os.Stat(dir); !ephemeral && !errors.Is(err, os.ErrNotExist) {
		// It may start again on its records: its sandboxes stay. Its warm
		// containers go (no one else can claim them, and its next start
		// fills a new pool), but not those its records say were claimed.
		return reapUnclaimedPool(ctx, d, inst, dir, ids)
	}
	removed := 0
	for _, c := range ids {
		if err := d.Remove(ctx, c.ID); err != nil {
			return removed, fmt.Errorf("reap container %s of instance %s: %w", c.ID, inst, err)
		}
		removed++
	}
	// The cgroup parent of its sandboxes, with what a crashed engine left
	// in it: nothing can start under it while the lease is held here.
	if err := docker.RemoveCgroupParent(inst, true); err != nil {
		return removed, fmt.Errorf("reap the cgroup parent of instance %s: %w", inst, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return removed, err
	}
	return removed, nil
}

// reapEgressTables deletes the egress table of every instance that is not
// running (its lease is not held) and has no container in left.
func reapEgressTables(ctx context.Context, left map[string][]docker.Owned) (int, error) {
	tables, err := egress.Tables(ctx, egress.TablePrefix)
	if err != nil {
		return 0, err
	}
	removed := 0
	var errs []error
	for _, t := range tables {
		inst := strings.TrimPrefix(t, egress.TablePrefix)
		if len(left[inst]) > 0 || leaseHeld(inst) {
			continue
		}
		if err := egress.DeleteTable(ctx, t); err != nil {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	return removed, errors.Join(errs...)
}

// leaseHeld reports whether a backend runs on instance's lease now.
func leaseHeld(inst string) bool {
	f, err := os.Open(filepath.Join(Dir, inst+".lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// reapUnclaimedPool removes the warm containers of a stopped instance that
// none of its sandbox records (under dir) names. It holds the instance's
// lease meanwhile (reapInstance), so the instance cannot start and claim
// one. Records it cannot read keep every container.
func reapUnclaimedPool(ctx context.Context, d *docker.Runtime, inst, dir string, ids []docker.Owned) (int, error) {
	if !slices.ContainsFunc(ids, func(c docker.Owned) bool { return c.Pool }) {
		return 0, nil
	}
	records, err := store.SandboxesIn(filepath.Join(dir, "records"))
	if err != nil {
		// Unreadable records: which warm container a sandbox holds is not
		// ours to judge. Every container stays; the error says why.
		return 0, fmt.Errorf("instance %s keeps its warm containers: its records: %w", inst, err)
	}
	claimed := map[string]bool{}
	for _, sb := range records {
		if sb.ContainerID != "" {
			claimed[sb.ContainerID] = true
		}
	}
	removed := 0
	for _, c := range ids {
		if !c.Pool || claimed[c.ID] {
			continue
		}
		if err := d.Remove(ctx, c.ID); err != nil {
			return removed, fmt.Errorf("reap warm container %s of instance %s: %w", c.ID, inst, err)
		}
		removed++
	}
	return removed, nil
}
