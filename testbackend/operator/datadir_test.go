package operator

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDataDirChecked: a data directory that is missing is created 0700; one
// that others may write, that another user owns, that is a symbolic link
// or that is no directory is refused, naming it and the fix.
func TestDataDirChecked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fresh := filepath.Join(dir, "fresh")
	if err := CheckDataDir(fresh); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("a new data directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	if err := CheckDataDir(fresh); err != nil {
		t.Fatalf("the data directory just made: %v", err)
	}

	for _, mode := range []os.FileMode{0o777, 0o770, 0o702} {
		d := filepath.Join(dir, fmt.Sprintf("writable-%04o", mode))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, "a data directory of mode "+mode.String(), CheckDataDir(d), d, fmt.Sprintf("%04o", mode), "chmod 700")
	}

	target := filepath.Join(dir, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "a data directory that is a symbolic link", CheckDataDir(link), link, "symbolic link")

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "a data directory that is a file", CheckDataDir(file), file, "not a directory")

	if os.Geteuid() != 0 {
		t.Log("not root: the other owner's case needs chown; skipped")
		return
	}
	other := filepath.Join(dir, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(other, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, "a data directory another user owns", CheckDataDir(other), other, "uid 65534")
}

// TestDefaultDataDirWithoutHome: with neither HOME nor XDG_CACHE_HOME the
// default is never a fixed path under /tmp: root's is under /var/lib,
// anyone else is asked for --data.
func TestDefaultDataDirWithoutHome(t *testing.T) {
	t.Setenv("HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")
	defer func(f func() int) { geteuid = f }(geteuid)

	geteuid = func() int { return 0 }
	if got := DefaultDataDir(); got != "/var/lib/rarecloud/testbackend" {
		t.Errorf("root without HOME: default data directory %q, want /var/lib/rarecloud/testbackend", got)
	}
	geteuid = func() int { return 1000 }
	if got := DefaultDataDir(); got != "" {
		t.Errorf("a user without HOME: default data directory %q, want none", got)
	}
	_, err := ResolveDataDir("")
	wantRefused(t, "a user without HOME nor --data", err, "--data", "HOME")
	if err != nil && strings.Contains(err.Error(), os.TempDir()) {
		t.Errorf("the error names a path under %s: %v", os.TempDir(), err)
	}
	if got, err := ResolveDataDir("given"); got != "given" || err != nil {
		t.Errorf("a data directory given: %q, %v", got, err)
	}
}
