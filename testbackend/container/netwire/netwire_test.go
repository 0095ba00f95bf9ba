package netwire

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// threads lists this process's OS threads.
func threads(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

// TestNewNetnsKeepsItsThread: making namespaces retires no OS thread and
// leaves the caller's thread in its own namespace. A retired thread kills
// the children it forked with a parent-death signal: the provider's
// acceptance tests, which run a backend in-process, saw every terraform
// process die (signal: killed) when each namespace was made on a thread
// that was then retired.
func TestNewNetnsKeepsItsThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("making network namespaces needs root: run the tests as root (make test does)")
	}
	own, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	before := threads(t)
	for i := range 10 {
		path := filepath.Join(dir, "ns"+strconv.Itoa(i))
		errc := make(chan error, 1)
		go func() { errc <- newNetns(path) }() // a goroutine that ends, on whatever thread
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH); _ = os.Remove(path) })
	}
	after := threads(t)
	for tid := range before {
		if !after[tid] {
			t.Errorf("thread %s is gone after making namespaces", tid)
		}
	}
	// Every thread is back in the host's namespace.
	for tid := range after {
		ns, err := os.Readlink("/proc/self/task/" + tid + "/ns/net")
		if err == nil && ns != own {
			t.Errorf("thread %s is in %s, not the host's %s", tid, ns, own)
		}
	}
	// And the namespaces are new ones.
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "ns0"), &st); err != nil || "net:["+strconv.FormatUint(st.Ino, 10)+"]" == own {
		t.Errorf("ns0 is not a namespace of its own: %v, inode %d, host %s", err, st.Ino, own)
	}
}

// TestLeaseCountCountsEveryBackend: the count is of every lease in the
// directory, whoever made it (another backend's included), and only of
// leases: other files there are not addresses; a directory that cannot
// be read is an error, not zero.
func TestLeaseCountCountsEveryBackend(t *testing.T) {
	dir := t.TempDir()
	o := &Wiring{leases: dir}
	for i, target := range []string{"container-of-this-backend", "container-of-another", "gone"} {
		if err := os.Symlink(target, filepath.Join(dir, "172.30.99."+strconv.Itoa(10+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-lease"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := o.LeaseCount(); err != nil || n != 3 {
		t.Fatalf("LeaseCount = %d, %v; want 3", n, err)
	}
	o.leases = filepath.Join(dir, "missing")
	if _, err := o.LeaseCount(); err == nil {
		t.Fatal("LeaseCount of a missing directory: no error")
	}
}
