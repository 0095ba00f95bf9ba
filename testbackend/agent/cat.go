package agent

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Exit codes of Cat, the same as the backend's file scripts use
// (container/docker/docker_files.go).
const (
	CatMissing    = 10 // no such file
	CatDirectory  = 11 // a directory
	CatNoAccess   = 12 // not readable by the sandbox user
	CatNotRegular = 13 // a device, FIFO or socket
)

// Cat copies the regular file at path to w and returns its exit code: 0,
// or one of the Cat* codes, or 1 with the reason on errw. It opens the
// file without blocking and checks what it opened, so a FIFO put at the
// path at any moment (even between a check and the open) is refused at
// once, never waited on: the shell's `< path` would wait for a writer
// until the file route's timeout. It copies at most limit+1 bytes, enough
// to tell a file over the limit: a file of any size (a sparse one costs
// its sandbox nothing) is never copied whole through the engine and the
// backend to be dropped there. A writer that has all it keeps
// (errEnough) ends the copy as a success too.
func Cat(path string, limit int64, w, errw io.Writer) int { return cat(path, limit, w, errw, nil) }

// catDeclined is what cat returns for a file decline turned down.
const catDeclined = -1

// cat is Cat, which, when decline (if any) says so of the regular file
// it opened, reads nothing and returns catDeclined.
func cat(path string, limit int64, w, errw io.Writer, decline func(fd int) bool) int {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOENT):
			return CatMissing
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return CatNoAccess
		case errors.Is(err, unix.ENXIO): // a socket
			return CatNotRegular
		case errors.Is(err, unix.ENAMETOOLONG):
			fmt.Fprintln(errw, "File name too long")
		case errors.Is(err, unix.ENOTDIR):
			fmt.Fprintln(errw, "Not a directory")
		default:
			fmt.Fprintln(errw, err)
		}
		return 1
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		fmt.Fprintln(errw, err)
		return 1
	}
	switch {
	case st.IsDir():
		return CatDirectory
	case !st.Mode().IsRegular():
		return CatNotRegular
	}
	if decline != nil && decline(fd) {
		return catDeclined
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		fmt.Fprintln(errw, err)
		return 1
	}
	if _, err := io.CopyN(w, f, limit+1); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, errEnough) {
		fmt.Fprintln(errw, err)
		return 1
	}
	return 0
}
