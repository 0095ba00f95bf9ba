// Package instance is a backend instance's identity on a shared engine:
// its id (from its data directory), the lease that says it is alive
// (instance.go), and the reaper that removes what instances that are gone
// for good left behind: containers, warm containers, address wiring and
// egress tables (reap.go).
package instance

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ID names a backend's containers on a shared engine. It comes from the
// data directory, so a restart finds its own containers again and never
// touches another backend's.
func ID(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return hex.EncodeToString(sum[:6])
}

// Dir holds one lease per backend instance that uses the engine:
// <instance>.lock, flock-ed for as long as the backend runs, holding the
// backend's data directory. It lives outside every data directory, so a
// backend whose data directory was deleted after it died can still be
// told apart from one that is alive.
var Dir = "/run/rarecloud/instances"

// leaseWait is how long a start waits for the lease of its own instance
// (a reaper holds it for a moment while it looks; a backend that is still
// running on the same data directory holds it for good).
const leaseWait = 15 * time.Second

// leaseEphemeral marks the lease of a backend that nothing starts again on
// its data (Config.Ephemeral): once it is not held, its containers go.
const leaseEphemeral = "ephemeral"

// Lease is a held instance lock.
type Lease struct {
	f    *os.File
	path string
}

// Acquire takes the instance's lock and records the data directory in
// it. It fails when another backend runs on the same data directory.
func Acquire(instance, dataDir string, ephemeral bool) (*Lease, error) {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return nil, fmt.Errorf("instance lease: %w", err)
	}
	path := filepath.Join(Dir, instance+".lock")
	deadline := time.Now().Add(leaseWait)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("instance lease: %w", err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil && sameFile(f, path):
			if err := f.Truncate(0); err != nil {
				_ = f.Close()
				return nil, fmt.Errorf("instance lease: %w", err)
			}
			content := dataDir + "\n"
			if ephemeral {
				content += leaseEphemeral + "\n"
			}
			if _, err := f.WriteAt([]byte(content), 0); err != nil {
				_ = f.Close()
				return nil, fmt.Errorf("instance lease: %w", err)
			}
			return &Lease{f: f, path: path}, nil
		case err == nil:
			// A reaper removed the file between our open and our lock.
			_ = f.Close()
			continue
		}
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("instance lease %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("another backend is running on the data directory %s (it holds %s): stop it, or use another --data directory", dataDir, path)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Release lets the lease go. The file stays: it still names the data
// directory, so once that is deleted a later backend reaps the containers
// this one left for its next start.
func (l *Lease) Release() {
	if l != nil {
		_ = l.f.Close()
	}
}

// sameFile reports whether f is still the file at path.
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}
