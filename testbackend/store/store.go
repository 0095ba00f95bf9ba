// Package store persists the test backend's records: sandboxes, create
// idempotency keys and exec idempotency keys, one JSON file each, and the
// output of run-mode
// programs, one file per sandbox beside its record, all written
// atomically so a crash at any point leaves either the old or the new
// file, never half of one.
package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
)

// Sandbox is the durable record of one sandbox.
type Sandbox struct {
	ID         string    `json:"id"`
	Account    string    `json:"account"`
	Status     string    `json:"status"`
	Template   string    `json:"template"`
	Image      string    `json:"image"`
	CreatedAt  time.Time `json:"createdAt"`
	TimeoutMs  int64     `json:"timeoutMs"`
	ExpiresAt  time.Time `json:"expiresAt"`
	RunMode    bool      `json:"runMode"`
	Entrypoint []string  `json:"entrypoint,omitempty"`
	Cmd        []string  `json:"cmd,omitempty"`
	// Env holds values only until the container has started with them
	// (a start cut short is started again from the record); EnvKeys stays.
	Env               map[string]string `json:"env,omitempty"`
	EnvKeys           []string          `json:"envKeys,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	ExitCode          *int              `json:"exitCode,omitempty"`
	EndedAt           *time.Time        `json:"endedAt,omitempty"`
	TerminationReason string            `json:"terminationReason,omitempty"`
	// TerminationMessage is the human-readable detail of TerminationReason
	// (records written before it existed carry the detail in the reason).
	TerminationMessage string `json:"terminationMessage,omitempty"`
	// IdleTimeoutMs (0: none) ends the sandbox after that long without
	// activity; IdleExpiresAt is when, as of the last write (activity moves
	// it in memory only; a restart starts the idle clock again).
	IdleTimeoutMs int64      `json:"idleTimeoutMs,omitempty"`
	IdleExpiresAt *time.Time `json:"idleExpiresAt,omitempty"`
	ContainerID   string     `json:"containerId,omitempty"`
	// LogBytes is the size of a run-mode program's output, kept in a file
	// of its own (PutLogs) and read when asked for, never held with the
	// record; 0: none.
	LogBytes int64 `json:"logBytes,omitempty"`
	// Logs held the output inline in records written before LogBytes
	// existed; the manager moves it to the record's log file at start.
	Logs string `json:"logs,omitempty"`
	// Files held the files written in test mode before its runtime
	// (package testmode) kept them with its containers; a test-mode start
	// hands them over to it and drops them (testbackend/testmode.go).
	Files map[string]string `json:"files,omitempty"`
	// IdempotencyKey and RequestHash travel with the record they made, so
	// a crash between writing the sandbox and writing the key can never
	// let a retry make a second sandbox.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	RequestHash    string `json:"requestHash,omitempty"`
	// Egress control: the mode ("" is ALLOW_ALL), the allowlist, and the
	// address the rules are keyed on (given before the container starts).
	EgressMode      string   `json:"egressMode,omitempty"`
	EgressAllowlist []string `json:"egressAllowlist,omitempty"`
	EgressIP        string   `json:"egressIp,omitempty"`
}

// Idempotency remembers what a create with an Idempotency-Key produced.
type Idempotency struct {
	Account     string    `json:"account"`
	Key         string    `json:"key"`
	RequestHash string    `json:"requestHash"`
	SandboxID   string    `json:"sandboxId,omitempty"`
	Status      int       `json:"status"`
	Body        []byte    `json:"body,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
}

// ExecKey remembers one command or run_code request made with an
// Idempotency-Key (an extension of API v1): written before its process
// starts, so that no restart can let a retry run it a second time, and
// again with its answer once it ended.
type ExecKey struct {
	SandboxID   string    `json:"sandboxId"`
	Key         string    `json:"key"`
	RequestHash string    `json:"requestHash"`
	CreatedAt   time.Time `json:"createdAt"`
	// Done says the process ended; Output or Error is its answer (neither:
	// the answer was too large to keep on disk). Not done after a restart:
	// the process may have run.
	Done   bool            `json:"done,omitempty"`
	Output json.RawMessage `json:"output,omitempty"`
	Error  json.RawMessage `json:"error,omitempty"`
}

// Store is a directory of records. It keeps nothing in memory: the caller
// owns the live state and serialises writes to the same record.
type Store struct {
	dir string
	// beforeSync, when set, runs before each record's fsync (tests make
	// the disk slow with it).
	beforeSync atomic.Pointer[func(path string)]
}

// SetBeforeSync installs fn to run before the fsync of every record
// written from now on; nil removes it. For tests that need a slow disk.
func (s *Store) SetBeforeSync(fn func(path string)) {
	if fn == nil {
		s.beforeSync.Store(nil)
		return
	}
	s.beforeSync.Store(&fn)
}

const (
	sandboxDir     = "sandboxes"
	idempotencyDir = "idempotency"
	execKeysDir    = "execkeys"
	logsDir        = "logs"
	logSuffix      = ".log"
)

// Open creates the directory layout if needed, and removes the temporary
// files of writes a crash cut short: they are never read, and may hold a
// record's env values. None of its directories may be a symbolic link
// (MkdirNoFollow), nor any record (readAll).
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	for _, d := range []string{dir, filepath.Join(dir, sandboxDir), filepath.Join(dir, idempotencyDir), filepath.Join(dir, execKeysDir), filepath.Join(dir, logsDir)} {
		if err := MkdirNoFollow(d); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	for _, sub := range []string{sandboxDir, idempotencyDir, execKeysDir, logsDir} {
		if err := removeLeftovers(filepath.Join(dir, sub)); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	return &Store{dir: dir}, nil
}

// tmpPrefix starts the name of a record being written (writeAtomic).
const tmpPrefix = ".tmp-"

// removeLeftovers removes dir's temporary files.
func removeLeftovers(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	removed := false
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) && e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			removed = true
		}
	}
	if removed {
		return syncDir(dir)
	}
	return nil
}

// MkdirNoFollow creates the directory (0700) if it is missing and refuses
// one that is a symbolic link or not a directory: the backend follows no
// links in its data directory, so a link planted there can neither point
// its records elsewhere nor show it files from elsewhere.
func MkdirNoFollow(path string) error {
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s is a symbolic link; remove it (the backend follows no links in its data directory)", path)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory; remove it", path)
	}
	return nil
}

// syncDir makes the renames and unlinks in dir durable: a rename or an
// unlink is in the directory, not in the file, and until the directory is
// synced a crash may undo it (an acknowledged delete resurrected, or a
// new record lost).
var syncDir = func(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ReadFileNoFollow reads a regular file of the data directory without
// following a symbolic link in its last component (the directories above
// it are checked by MkdirNoFollow): a link, a FIFO or a device is refused
// by name instead of read through.
func ReadFileNoFollow(path string) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO planted here must not hang the start.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link; remove it (the backend follows no links in its data directory)", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s); remove it", path, fi.Mode().Type())
	}
	return io.ReadAll(f)
}

// Dir is the store's root directory.
func (s *Store) Dir() string { return s.dir }

// PutSandbox writes the record atomically.
func (s *Store) PutSandbox(sb *Sandbox) error {
	if !safeName(sb.ID) {
		return fmt.Errorf("store: bad sandbox id %q", sb.ID)
	}
	data, err := Encode(sb)
	if err != nil {
		return fmt.Errorf("store: encode sandbox %s: %w", sb.ID, err)
	}
	return s.PutSandboxEncoded(sb.ID, data)
}

// PutSandboxEncoded writes a record already encoded as JSON (a snapshot
// taken under the caller's lock), atomically.
func (s *Store) PutSandboxEncoded(id string, data []byte) error {
	if !safeName(id) {
		return fmt.Errorf("store: bad sandbox id %q", id)
	}
	return s.writeFile(filepath.Join(s.dir, sandboxDir, id+".json"), data)
}

// DeleteSandbox removes the record and then its log file; a missing one
// is not an error. A crash in between leaves a log file without a
// record, which OrphanLogs finds.
func (s *Store) DeleteSandbox(id string) error {
	if !safeName(id) {
		return fmt.Errorf("store: bad sandbox id %q", id)
	}
	if err := removeFile(filepath.Join(s.dir, sandboxDir, id+".json")); err != nil {
		return err
	}
	return s.DeleteLogs(id)
}

// PutLogs writes a sandbox's run-mode output to its log file, atomically.
func (s *Store) PutLogs(id string, data []byte) error {
	if !safeName(id) {
		return fmt.Errorf("store: bad sandbox id %q", id)
	}
	return s.writeFile(s.logPath(id), data)
}

// Logs reads a sandbox's log file; a missing one is fs.ErrNotExist.
func (s *Store) Logs(id string) ([]byte, error) {
	if !safeName(id) {
		return nil, fmt.Errorf("store: bad sandbox id %q", id)
	}
	return ReadFileNoFollow(s.logPath(id))
}

// DeleteLogs removes a sandbox's log file; a missing one is not an error.
func (s *Store) DeleteLogs(id string) error {
	if !safeName(id) {
		return fmt.Errorf("store: bad sandbox id %q", id)
	}
	return removeFile(s.logPath(id))
}

// LogIDs lists the sandboxes that have a log file.
func (s *Store) LogIDs() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, logsDir))
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if id, ok := strings.CutSuffix(name, logSuffix); ok && !strings.HasPrefix(name, ".") && e.Type().IsRegular() {
			out = append(out, id)
		}
	}
	return out, nil
}

func (s *Store) logPath(id string) string {
	return filepath.Join(s.dir, logsDir, id+logSuffix)
}

// Sandboxes loads every sandbox record.
func (s *Store) Sandboxes() ([]*Sandbox, error) {
	var out []*Sandbox
	err := readAll(filepath.Join(s.dir, sandboxDir), func() any { sb := &Sandbox{}; out = append(out, sb); return sb })
	return out, err
}

// SandboxesIn reads the sandbox records of the store at dir without
// opening it (nothing is created or removed): what a reaper reads of a
// backend that is not running.
func SandboxesIn(dir string) ([]*Sandbox, error) {
	return (&Store{dir: dir}).Sandboxes()
}

// PutIdempotency writes the key's record atomically.
func (s *Store) PutIdempotency(rec *Idempotency) error {
	data, err := Encode(rec)
	if err != nil {
		return fmt.Errorf("store: encode idempotency key: %w", err)
	}
	return s.writeFile(s.idempotencyPath(rec.Account, rec.Key), data)
}

// DeleteIdempotency removes the key's record.
func (s *Store) DeleteIdempotency(account, key string) error {
	return removeFile(s.idempotencyPath(account, key))
}

// Idempotencies loads every idempotency record.
func (s *Store) Idempotencies() ([]*Idempotency, error) {
	var out []*Idempotency
	err := readAll(filepath.Join(s.dir, idempotencyDir), func() any { r := &Idempotency{}; out = append(out, r); return r })
	return out, err
}

// Keys are client input: the file name is a hash, never the key itself.
func (s *Store) idempotencyPath(account, key string) string {
	sum := sha256.Sum256([]byte(account + "\x00" + key))
	return filepath.Join(s.dir, idempotencyDir, hex.EncodeToString(sum[:])+".json")
}

// PutExecKey writes the exec key's record atomically.
func (s *Store) PutExecKey(rec *ExecKey) error {
	data, err := Encode(rec)
	if err != nil {
		return fmt.Errorf("store: encode exec key: %w", err)
	}
	return s.writeFile(s.execKeyPath(rec.SandboxID, rec.Key), data)
}

// DeleteExecKey removes the exec key's record.
func (s *Store) DeleteExecKey(sandboxID, key string) error {
	return removeFile(s.execKeyPath(sandboxID, key))
}

// ExecKeys loads every exec key record.
func (s *Store) ExecKeys() ([]*ExecKey, error) {
	var out []*ExecKey
	err := readAll(filepath.Join(s.dir, execKeysDir), func() any { r := &ExecKey{}; out = append(out, r); return r })
	return out, err
}

// Keys are client input: the file name is a hash, never the key itself.
func (s *Store) execKeyPath(sandboxID, key string) string {
	sum := sha256.Sum256([]byte(sandboxID + "\x00" + key))
	return filepath.Join(s.dir, execKeysDir, hex.EncodeToString(sum[:])+".json")
}

func safeName(id string) bool {
	return id != "" && len(id) < 128 && !strings.ContainsAny(id, "/\\\x00") && id != "." && id != ".."
}

func (s *Store) writeFile(path string, data []byte) error {
	return writeAtomic(path, data, s.beforeSync.Load())
}

// WriteFileAtomic writes data to path as the store writes its records: a
// temporary file in the same directory, synced, then renamed over the old
// one, so a crash leaves the old content or the new, never half of it.
func WriteFileAtomic(path string, data []byte) error {
	return writeAtomic(path, data, nil)
}

// writeAtomic is WriteFileAtomic with the test hook run before the sync.
func writeAtomic(path string, data []byte, beforeSync *func(path string)) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), tmpPrefix+"*")
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("store: write %s: %w", filepath.Base(path), err)
	}
	if beforeSync != nil {
		(*beforeSync)(path)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("store: sync %s: %w", filepath.Base(path), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", filepath.Base(path), err)
	}
	failpoint.Hit(failpoint.StoreSynced)
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("store: rename %s: %w", filepath.Base(path), err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("store: sync the directory of %s: %w", filepath.Base(path), err)
	}
	return nil
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("store: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("store: sync the directory of %s: %w", filepath.Base(path), err)
	}
	return nil
}

// readAll decodes every *.json file in dir into a fresh value from next.
// A file that does not decode is reported, not skipped: losing a record
// silently would leak its container.
func readAll(dir string, next func() any) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		data, err := ReadFileNoFollow(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if err := json.Unmarshal(data, next()); err != nil {
			return fmt.Errorf("store: decode %s: %w", name, err)
		}
	}
	return nil
}
