// Package owndir checks a directory the backend keeps to itself (its data
// directory, the agents' channel directory): whoever else can write it,
// or reach into it, can plant or take over what the backend keeps there.
package owndir

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Problem is what is wrong with a directory Ensure refused.
type Problem int

const (
	// Link: the path is a symbolic link.
	Link Problem = iota + 1
	// NotDir: the path is not a directory.
	NotDir
	// Owner: another user owns it (Refusal.UID).
	Owner
	// Mode: it has permission bits it must not have (Refusal.Perm).
	Mode
)

// Refusal is Ensure's answer for a directory that is there but not the
// backend's alone.
type Refusal struct {
	Dir     string
	Problem Problem
	UID     int         // the owner, with Owner
	Perm    os.FileMode // its permission bits, with Mode
}

func (r *Refusal) Error() string {
	switch r.Problem {
	case Link:
		return fmt.Sprintf("%s is a symbolic link", r.Dir)
	case NotDir:
		return fmt.Sprintf("%s is not a directory", r.Dir)
	case Owner:
		return fmt.Sprintf("%s is owned by uid %d, not by uid %d", r.Dir, r.UID, os.Geteuid())
	default:
		return fmt.Sprintf("%s has mode %04o", r.Dir, r.Perm)
	}
}

// CreateError is Ensure's answer when a missing directory could not be
// made.
type CreateError struct{ Err error }

func (e *CreateError) Error() string { return "create: " + e.Err.Error() }
func (e *CreateError) Unwrap() error { return e.Err }

// Ensure makes dir (mode 0700, and its missing parents) when it is
// missing. One that exists must be a directory, not a symbolic link,
// owned by this process's user, and have none of the permission bits in
// closed: a *Refusal says which it is not. Any other error is the file
// system's (a *CreateError when making it failed).
func Ensure(dir string, closed os.FileMode) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return &CreateError{Err: err}
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return &Refusal{Dir: dir, Problem: Link}
	case !fi.IsDir():
		return &Refusal{Dir: dir, Problem: NotDir}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return &Refusal{Dir: dir, Problem: Owner, UID: int(st.Uid)}
	}
	if perm := fi.Mode().Perm(); perm&closed != 0 {
		return &Refusal{Dir: dir, Problem: Mode, Perm: perm}
	}
	return nil
}
