// Package operator checks the files an operator gives the backend before
// they are trusted (issue 27): the tokens file must be the backend user's
// alone and list each token once (tokens.go); the data directory must be
// the backend user's, closed to others' writes, and not a link, and its
// default is never a fixed path under /tmp (datadir.go). What lies
// inside the data directory is read without following links
// (store.MkdirNoFollow, ReadFileNoFollow).
package operator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/owndir"
)

// geteuid is os.Geteuid; tests stand in for another user with it.
var geteuid = os.Geteuid

// DefaultDataDir is the data directory when none is given: under the
// user's cache directory ($XDG_CACHE_HOME, else $HOME/.cache); for root
// without either, /var/lib/rarecloud/testbackend, beside what make setup
// keeps in /var/lib/rarecloud; for anyone else without either, none (""):
// ResolveDataDir then refuses and asks for one. It is never a fixed path
// under /tmp, where another local user could plant a dev token, records
// or links before the backend starts.
func DefaultDataDir() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "rarecloud-testbackend")
	}
	if geteuid() == 0 {
		return "/var/lib/rarecloud/testbackend"
	}
	return ""
}

// ResolveDataDir is dir, or DefaultDataDir when dir is empty; when there
// is no default either, an error that asks for one.
func ResolveDataDir(dir string) (string, error) {
	if dir == "" {
		dir = DefaultDataDir()
	}
	if dir == "" {
		return "", errors.New("pass a data directory with --data (RARECLOUD_TESTBACKEND_DATA): neither HOME nor XDG_CACHE_HOME is set, so there is no cache directory to keep one in")
	}
	return dir, nil
}

// CheckDataDir creates the data directory (0700) when it is missing;
// one that exists must be a directory, not a symbolic link, owned by this
// process's user, and writable by neither its group nor others: whoever
// can write it can plant a dev token, records or links in it.
func CheckDataDir(dir string) error {
	err := owndir.Ensure(dir, 0o022)
	var r *owndir.Refusal
	var c *owndir.CreateError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &c):
		return fmt.Errorf("create the data directory: %w", c.Err)
	case !errors.As(err, &r):
		return fmt.Errorf("data directory: %w", err)
	case r.Problem == owndir.Link:
		return fmt.Errorf("data directory %s is a symbolic link: pass the directory itself as --data (the backend follows no links in its data directory)", dir)
	case r.Problem == owndir.NotDir:
		return fmt.Errorf("data directory %s is not a directory: pass a directory as --data", dir)
	case r.Problem == owndir.Owner:
		return fmt.Errorf("data directory %s is owned by uid %d, not by this backend's user (uid %d): chown it, or pass a directory of this user's as --data", dir, r.UID, geteuid())
	default:
		return fmt.Errorf("data directory %s may be written by its group or others (mode %04o): run chmod 700 %s, or pass another --data", dir, r.Perm, dir)
	}
}
