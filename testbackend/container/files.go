package container

import (
	"errors"
	"fmt"
)

// File operations (Runtime.WriteFile and Runtime.ReadFile) fail with these
// errors, or with an engine error (ErrEngineUnavailable, ErrNotFound, …);
// the sandbox package maps them onto API codes.
var (
	// ErrFileNotFound: ReadFile found nothing at the path.
	ErrFileNotFound = errors.New("no such file")
	// ErrIsADirectory: the path is a directory.
	ErrIsADirectory = errors.New("is a directory")
	// ErrNotRegular: the path is a device, a FIFO or a socket, which a
	// read would wait on or never finish (/dev/zero) and a write would
	// not store.
	ErrNotRegular = errors.New("not a regular file")
	// ErrNameTooLong: a name in the path is longer than the file system allows.
	ErrNameTooLong = errors.New("file name too long")
	// ErrParentNotDirectory: a parent of the path is a file.
	ErrParentNotDirectory = errors.New("a parent is not a directory")
	// ErrNoSpace: the writable area is full.
	ErrNoSpace = errors.New("no space left")
	// ErrFilePermission: the sandbox user may not read or write the path.
	ErrFilePermission = errors.New("permission denied")
	// ErrFileTooLarge: ReadFile found a file larger than its limit.
	ErrFileTooLarge = errors.New("file larger than the limit")
	// ErrFileTimedOut: the operation did not finish in time.
	ErrFileTimedOut = errors.New("file operation timed out")
)

// FileFailure is a file operation that failed for a reason none of the
// errors above names: how the process that did it exited, and what it said.
type FileFailure struct {
	ExitCode int
	Stderr   string
}

func (e *FileFailure) Error() string {
	return fmt.Sprintf("file operation failed with exit code %d: %s", e.ExitCode, e.Stderr)
}
