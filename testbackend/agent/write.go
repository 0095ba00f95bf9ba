package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Exit codes of Write, the same as the backend's write script uses
// (container/docker/docker_files.go); a directory or a file that is not
// regular at the path ends as Cat's CatDirectory and CatNotRegular.
const (
	WriteNoParent = 10 // the parent directories could not be made
	WriteFailed   = 12 // the content could not be written or put in place
)

// RenameMark is the line Write (and the backend's write script) prints
// once the content is complete, right before the rename that puts it in
// place: a program that ends as soon as the file is there (a run-mode job
// waiting for its input) may take the writer with it, and the mark tells
// the backend that the write got that far.
const RenameMark = "rarecloud-renaming"

// Write puts content at path as one rename: it goes to a temporary file
// next to path that replaces path only when complete, so a full disk never
// leaves half a file behind or eats the old one, and a symlink at path is
// replaced, not followed. Parents are made as needed. It returns 0 or an
// exit code of the backend's file scripts, with the reason on errw in the
// C library's words (what the backend reads: "No space left on device",
// "Not a directory", "File name too long", "Permission denied").
//
// It needs nothing from the sandbox's image: a write used to be a shell
// and five of its tools, so an image without them could not be written to
// (the backend answered 500), and under gVisor each was a process start.
func Write(path string, content io.Reader, out, errw io.Writer) int {
	switch st, err := os.Stat(path); {
	case err == nil && st.IsDir():
		return CatDirectory
	case err == nil && !st.Mode().IsRegular():
		if lst, lerr := os.Lstat(path); lerr != nil || lst.Mode()&os.ModeSymlink == 0 {
			return CatNotRegular // a device, FIFO or socket; a link to one is replaced
		}
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		fmt.Fprintln(errw, "mkdir:", errnoText(err))
		return WriteNoParent
	}
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	tmp := filepath.Join(dir, ".rarecloud-write."+hex.EncodeToString(suffix[:]))
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
	if err != nil {
		fmt.Fprintln(errw, "write:", errnoText(err))
		return WriteFailed
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = io.Copy(f, content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		fmt.Fprintln(errw, "write:", errnoText(err))
		return WriteFailed
	}
	fmt.Fprintln(out, RenameMark)
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		if errors.Is(err, unix.EISDIR) {
			return CatDirectory // a directory took the path meanwhile
		}
		fmt.Fprintln(errw, "rename:", errnoText(err))
		return WriteFailed
	}
	return 0
}

// errnoText is an error's system error in the C library's words
// ("No space left on device"), what the backend's reading of a write's
// stderr expects; any other error as it is.
func errnoText(err error) string {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return err.Error()
	}
	s := errno.Error()
	return strings.ToUpper(s[:1]) + s[1:]
}
