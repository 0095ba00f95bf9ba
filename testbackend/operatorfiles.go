package testbackend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// The files an operator gives the backend are checked before they are
// trusted (issue 27): the tokens file must be the backend user's alone
// and list each token once; the data directory must be the backend
// user's, closed to others' writes, and not a link. What lies inside it
// is read without following links (store.MkdirNoFollow, ReadFileNoFollow).

// checkDataDir creates the data directory (0700) when it is missing;
// one that exists must be a directory, not a symbolic link, owned by this
// process's user, and writable by neither its group nor others: whoever
// can write it can plant a dev token, records or links in it.
func checkDataDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create the data directory: %w", err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("data directory %s is a symbolic link: pass the directory itself as --data (the backend follows no links in its data directory)", dir)
	case !fi.IsDir():
		return fmt.Errorf("data directory %s is not a directory: pass a directory as --data", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != geteuid() {
		return fmt.Errorf("data directory %s is owned by uid %d, not by this backend's user (uid %d): chown it, or pass a directory of this user's as --data", dir, st.Uid, geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("data directory %s may be written by its group or others (mode %04o): run chmod 700 %s, or pass another --data", dir, perm, dir)
	}
	return nil
}

// tokensFile is the tokens file's layout.
type tokensFile struct {
	Tokens   []Token   `json:"tokens"`
	Accounts []Account `json:"accounts"`
}

// readTokensFile reads and decodes the tokens file, refusing one that its
// group or others may read or write unless shared says it is meant to be.
// lines holds the line of each entry of "tokens", for messages.
func readTokensFile(path string, shared bool) (tokens []Token, accounts []Account, lines []int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tokens file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat() // of the file opened, not of what the path names later
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tokens file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && !shared {
		return nil, nil, nil, fmt.Errorf("tokens file %s may be read or written by its group or others (mode %04o): run chmod 600 %s, or pass --allow-shared-tokens-file if it is meant to be shared", path, perm, path)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	var tf tokensFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tf); err != nil {
		return nil, nil, nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	if len(tf.Tokens) == 0 {
		return nil, nil, nil, fmt.Errorf("tokens file %s lists no tokens", path)
	}
	return tf.Tokens, tf.Accounts, entryLines(data), nil
}

// entryLines is the line (from 1) on which each entry of the top-level
// "tokens" array starts, or nil when it cannot tell (the file decoded
// already, so it always can).
func entryLines(data []byte) []int {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		if key != "tokens" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return nil
		}
		var lines []int
		for dec.More() {
			off := int(dec.InputOffset())
			for off < len(data) && bytes.IndexByte([]byte(" \t\r\n,"), data[off]) >= 0 {
				off++
			}
			lines = append(lines, 1+bytes.Count(data[:off], []byte("\n")))
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
		}
		return lines
	}
	return nil
}

// atLine is " (line N)" for entry i when its line is known.
func atLine(lines []int, i int) string {
	if i < len(lines) {
		return fmt.Sprintf(" (line %d)", lines[i])
	}
	return ""
}
