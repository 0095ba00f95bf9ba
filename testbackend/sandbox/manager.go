// Package sandbox is the sandbox lifecycle: create (with idempotency),
// pending → running → exited/terminated, expiry, retention, exec and files,
// and reconciliation with the engine after a restart. It owns the live
// records; the store persists them and the runtime runs them. It is the
// same in both modes: the runtime is what differs (the test mode's, in
// package testmode, runs nothing).
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/accountrate"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Statuses of a sandbox.
const (
	StatusPending    = "pending"
	StatusRunning    = "running"
	StatusExited     = "exited"
	StatusTerminated = "terminated"
)

// Modes of the backend. The backend picks the runtime by its mode
// (testbackend/backend.go: Docker under gVisor, or package testmode's,
// which runs nothing); the lifecycle never looks at the mode, only the
// runtime does what differs. The mode is reported (Mode), for /v1/health
// and the API's "mocked" flag.
const (
	ModeReal = "real"
	ModeTest = "test"
)

// Config configures a Manager.
type Config struct {
	Mode      string            // ModeReal or ModeTest, reported by Mode
	Runtime   container.Runtime // required
	Store     *store.Store
	Templates []Template // default DefaultTemplates()
	// Retention keeps exited and terminated records readable; default 24h.
	Retention time.Duration
	// IdempotencyTTL keeps idempotency keys; default 24h.
	IdempotencyTTL time.Duration
	// MaxRetainedPerAccount caps each account's ended sandboxes kept for
	// Retention, and MaxRetainedBytesPerAccount their records' bytes:
	// past either its oldest (by EndedAt) are forgotten early.
	// MaxIdempotencyKeysPerAccount caps its idempotency keys, and
	// MaxIdempotencyBytesPerAccount what they keep: past either its
	// oldest are forgotten early. Defaults DefaultMaxRetainedPerAccount,
	// DefaultMaxRetainedBytesPerAccount, DefaultMaxIdempotencyKeysPerAccount
	// and DefaultMaxIdempotencyBytesPerAccount (caps.go).
	MaxRetainedPerAccount         int
	MaxRetainedBytesPerAccount    int64
	MaxIdempotencyKeysPerAccount  int
	MaxIdempotencyBytesPerAccount int64
	// MaxRunningExecKeysPerAccount caps each account's commands with an
	// Idempotency-Key running at once (they run on after their requests
	// are gone), MaxExecAnswerBytesPerAccount the answers its finished
	// ones keep in memory. Defaults DefaultMaxRunningExecKeysPerAccount
	// and DefaultMaxExecAnswerBytesPerAccount (exec_caps.go).
	MaxRunningExecKeysPerAccount int
	MaxExecAnswerBytesPerAccount int64
	// PullTimeout bounds how long a create waits for its image's pull;
	// default container.DefaultPullTimeout (the runtime's own bound of
	// one pull, which the backend sets to the same value).
	PullTimeout time.Duration
	// HomeBytes and TmpBytes override the templates' disk sizes (tests use small ones).
	HomeBytes int64
	TmpBytes  int64
	// MaxProcs is the process limit of the sandbox user; default 512.
	MaxProcs int64
	// PoolSize is how many warm containers each template keeps; 0 for none.
	PoolSize int
	// RefillDelay is how long the refill after a claim waits for the
	// claimed sandbox's first operation to end, so that starting a warm
	// container does not take the CPU that operation needs; default
	// DefaultRefillDelay, negative for a refill at once.
	RefillDelay time.Duration
	// VCPULimit caps the vCPUs of each account's live sandboxes (default
	// DefaultVCPULimit); AccountVCPULimits overrides it per account.
	VCPULimit         float64
	AccountVCPULimits map[string]float64
	// HostMemoryBytes is the machine's memory (default: MemTotal;
	// negative: no host bound);
	// HostMemoryReserve what sandboxes leave to the host (default
	// DefaultHostMemoryReserve); MemoryOvercommit how far the sandboxes'
	// memory limits may add up past what is left (default
	// DefaultMemoryOvercommit); HostShare the part of that one account may
	// hold (default DefaultHostShare). See hostcap.go.
	HostMemoryBytes   int64
	HostMemoryReserve int64
	MemoryOvercommit  float64
	HostShare         float64
	// HostCPUs is the machine's CPUs (default runtime.NumCPU()): while
	// other accounts have live sandboxes, one account's running sandboxes
	// together use at most HostShare of them (weights.go).
	HostCPUs int
	// Addresses is how many addresses the sandboxes of this backend may
	// hold on the sandbox network (the runtime's pool); 0: no bound.
	// NetworkLeases, when set, reads how many of them every backend on
	// the network holds now, this one's included (hostcap.go).
	Addresses     int
	NetworkLeases func() (int, error)
	// DiskReserve is the free space a create leaves on the data
	// directory's file system (default DefaultDiskReserve, negative: no
	// bound); FreeDisk reads that free space (default FreeSpace; tests
	// stand in for it). See diskcap.go.
	DiskReserve int64
	FreeDisk    func(dir string) (int64, error)
	// StartSlots is how many container starts run at once, taking turns
	// across accounts (default DefaultStartSlots; turnqueue.go).
	StartSlots int
	// StartShare is how many of them one account may run while other
	// accounts have live sandboxes (default DefaultStartShare()), and
	// StartDuty the part of the time its starts may hold that share then
	// (0 < StartDuty <= 1, default DefaultStartDuty; turnqueue.go).
	StartShare int
	StartDuty  float64
	// TransferShare is how many file reads and writes one account runs
	// at once while other accounts have live sandboxes (default
	// DefaultTransferShare; transfers.go); TransferWait how long one
	// waits in its account's line before the 429 (default
	// DefaultTransferWait).
	TransferShare int
	TransferWait  time.Duration
	// TransferRate is how many bytes a second one account's file reads
	// and writes move together while other accounts have live sandboxes
	// (default DefaultTransferRate, at least MinTransferRate;
	// transfers.go).
	TransferRate int
	// Egress enforces egress policies; nil: egress control is off.
	Egress EgressEnforcer
	// MinIdleTimeout is the least idleTimeoutMs (smaller ones are raised
	// to it); default DefaultMinIdleTimeout. Tests lower it.
	MinIdleTimeout time.Duration
	Logger         *slog.Logger
}

// Manager owns every sandbox of one backend instance.
type Manager struct {
	cfg Config
	rt  container.Runtime
	// immediate: the runtime runs nothing (container.Immediate), so a
	// create starts its sandbox before it answers (create_place.go).
	immediate bool
	st        *store.Store
	disk      *recordWriter // writes records off mu (records.go)
	log       *slog.Logger
	templates map[string]Template
	order     []string

	ctx    context.Context // cancelled by Close; background work stops with it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closing  bool // Close ran: no new background work (background.go)
	boxes    map[string]*store.Sandbox
	accounts map[string]*accountIndex // boxes by account, and their live vCPUs (index.go)
	live     liveUse                  // every account's live sandboxes' memory and count (index.go)
	seq      uint64                   // orders the members of ageSets that arrive at the same instant (caps.go)
	timers   map[string]*time.Timer
	watching map[string]bool
	starting map[string]context.CancelFunc // starts under way, queued or running (create.go); cancelling drops a queued one
	expiring map[string]bool               // expiring or idling out: their container is being removed, the exit is ours
	busy     map[string]int                // operations under way (lifetime.go): the idle clock waits for them
	idem     map[string]*idemEntry
	execKeys map[string]*execKeyring // by sandbox id (exec_idempotency.go)
	execUse  map[string]*execAccount // by account: its keyed commands' running ones and answers (exec_caps.go)
	pools    map[string]*warmPool
	refills  map[string]*deferredRefill // by the claiming sandbox's id (pool.go)
	// changed holds, per sandbox, a channel closed at its next status change.
	changed map[string]chan struct{}
	// poolChanged is closed and replaced whenever a pool gains a container.
	poolChanged chan struct{}
	// removing holds the deleted sandboxes whose container is being
	// removed, each with a channel closed once it is (background.go).
	removing map[string]chan struct{}

	engine    engineState
	diskSpace *sampler              // the data directory's free space (diskcap.go)
	leases    *sampler              // addresses leased on the sandbox network (hostcap.go); nil: not known
	starts    *turnQueue            // container starts, in turns across accounts
	transfers *turnQueue            // file reads and writes, in turns across accounts (transfers.go)
	paces     *accountrate.Limiters // their bytes, each account's at TransferRate (transfers.go)
	weights   *weights              // the running sandboxes' CPU weights (weights.go); nil: the runtime cannot weigh

	// liveAccounts is how many accounts have live sandboxes (index.go):
	// changed under mu, read by the start queue without it.
	liveAccounts atomic.Int64
}

// New builds a manager; Start loads records and reconciles.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("sandbox: a store is required")
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = ModeReal
	case ModeReal, ModeTest:
	default:
		return nil, fmt.Errorf("sandbox: unknown mode %q (want real or test)", cfg.Mode)
	}
	if cfg.Runtime == nil {
		return nil, errors.New("sandbox: a runtime is required")
	}
	if cfg.Templates == nil {
		cfg.Templates = DefaultTemplates()
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 24 * time.Hour
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = 24 * time.Hour
	}
	if cfg.MaxRetainedPerAccount <= 0 {
		cfg.MaxRetainedPerAccount = DefaultMaxRetainedPerAccount
	}
	if cfg.MaxIdempotencyKeysPerAccount <= 0 {
		cfg.MaxIdempotencyKeysPerAccount = DefaultMaxIdempotencyKeysPerAccount
	}
	if cfg.MaxRetainedBytesPerAccount <= 0 {
		cfg.MaxRetainedBytesPerAccount = DefaultMaxRetainedBytesPerAccount
	}
	if cfg.MaxIdempotencyBytesPerAccount <= 0 {
		cfg.MaxIdempotencyBytesPerAccount = DefaultMaxIdempotencyBytesPerAccount
	}
	if cfg.MaxRunningExecKeysPerAccount <= 0 {
		cfg.MaxRunningExecKeysPerAccount = DefaultMaxRunningExecKeysPerAccount
	}
	if cfg.MaxExecAnswerBytesPerAccount <= 0 {
		cfg.MaxExecAnswerBytesPerAccount = DefaultMaxExecAnswerBytesPerAccount
	}
	if cfg.PullTimeout <= 0 {
		cfg.PullTimeout = container.DefaultPullTimeout
	}
	if cfg.VCPULimit <= 0 {
		cfg.VCPULimit = DefaultVCPULimit
	}
	if cfg.MinIdleTimeout <= 0 {
		cfg.MinIdleTimeout = DefaultMinIdleTimeout
	}
	if cfg.HostMemoryBytes == 0 {
		cfg.HostMemoryBytes = hostMemory()
	}
	if cfg.HostMemoryReserve <= 0 {
		cfg.HostMemoryReserve = DefaultHostMemoryReserve
	}
	if cfg.MemoryOvercommit <= 0 {
		cfg.MemoryOvercommit = DefaultMemoryOvercommit
	}
	if cfg.HostShare <= 0 || cfg.HostShare > 1 {
		cfg.HostShare = DefaultHostShare
	}
	if cfg.HostCPUs <= 0 {
		cfg.HostCPUs = runtime.NumCPU()
	}
	if cfg.DiskReserve == 0 {
		cfg.DiskReserve = DefaultDiskReserve
	}
	if cfg.FreeDisk == nil {
		cfg.FreeDisk = FreeSpace
	}
	if cfg.StartSlots <= 0 {
		cfg.StartSlots = DefaultStartSlots
	}
	if cfg.StartShare <= 0 {
		cfg.StartShare = DefaultStartShare()
	}
	if cfg.StartDuty <= 0 || cfg.StartDuty > 1 {
		cfg.StartDuty = DefaultStartDuty
	}
	if cfg.TransferShare <= 0 {
		cfg.TransferShare = DefaultTransferShare
	}
	if cfg.TransferWait <= 0 {
		cfg.TransferWait = DefaultTransferWait
	}
	if cfg.TransferRate <= 0 {
		cfg.TransferRate = DefaultTransferRate
	}
	cfg.TransferRate = max(cfg.TransferRate, MinTransferRate) // the command refuses less
	if cfg.MaxProcs <= 0 {
		cfg.MaxProcs = 512
	}
	if cfg.RefillDelay == 0 {
		cfg.RefillDelay = DefaultRefillDelay
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg:       cfg,
		rt:        cfg.Runtime,
		st:        cfg.Store,
		disk:      newRecordWriter(cfg.Store, cfg.Logger),
		log:       cfg.Logger,
		templates: map[string]Template{},
		ctx:       ctx,
		cancel:    cancel,
		boxes:     map[string]*store.Sandbox{},
		accounts:  map[string]*accountIndex{},
		timers:    map[string]*time.Timer{},
		watching:  map[string]bool{},
		starting:  map[string]context.CancelFunc{},
		expiring:  map[string]bool{},
		busy:      map[string]int{},
		idem:      map[string]*idemEntry{},
		execKeys:  map[string]*execKeyring{},
		pools:     map[string]*warmPool{},
		refills:   map[string]*deferredRefill{},
		changed:   map[string]chan struct{}{},

		poolChanged: make(chan struct{}),
		removing:    map[string]chan struct{}{},
	}
	m.weights = newWeights(m.rt)
	m.starts = newTurnQueue(cfg.StartSlots, cfg.StartShare, restFor(cfg.StartDuty), m.contended)
	m.starts.onHold = m.startPlacesChanged
	m.transfers = newTurnQueue(maxTransfers, cfg.TransferShare, 0, m.contended)
	m.paces = accountrate.New(cfg.TransferRate, TransferBurst)
	if cfg.DiskReserve > 0 {
		m.diskSpace = newDiskSpace(cfg.Store.Dir(), cfg.FreeDisk, cfg.Logger)
	}
	if cfg.Addresses > 0 && cfg.NetworkLeases != nil {
		m.leases = newNetworkLeases(cfg.NetworkLeases, cfg.Logger)
	}
	if imm, ok := cfg.Runtime.(container.Immediate); ok {
		m.immediate = imm.Immediate()
	}
	for _, t := range cfg.Templates {
		m.templates[t.Name] = t
		m.order = append(m.order, t.Name)
	}
	return m, nil
}

// Mode is ModeReal or ModeTest, as the backend was configured.
func (m *Manager) Mode() string { return m.cfg.Mode }

// Templates lists the templates in their configured order.
func (m *Manager) Templates() []Template {
	out := make([]Template, 0, len(m.order))
	for _, n := range m.order {
		out = append(out, m.templates[n])
	}
	return out
}

func (m *Manager) templateNames() []string { return append([]string(nil), m.order...) }

// Close stops timers and background work. Sandboxes stay, as records and
// containers, for the next start; idle warm containers go, since nothing
// would own them if this backend never came back.
func (m *Manager) Close() {
	m.cancel()
	m.mu.Lock()
	m.closing = true
	for id, t := range m.timers {
		t.Stop()
		delete(m.timers, id)
	}
	for _, e := range m.idem {
		if e.expiry != nil {
			e.expiry.Stop()
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
	m.drainPools()
	m.disk.wg.Wait() // every record handed over is on disk
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func newID() string {
	var b [15]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return "sbx-" + idEncoding.EncodeToString(b[:])
}

// persistLocked hands a snapshot of the record to the writer, which puts
// it on disk off the lock (records.go); a failed write is logged there. It
// reports only a record that cannot be encoded. Callers that must not
// answer before the record is durable use putSandboxLocked and wait.
func (m *Manager) persistLocked(sb *store.Sandbox) error {
	w := m.putSandboxLocked(sb)
	select {
	case <-w.done:
		if w.err != nil {
			return errorf(CodeInternal, "could not save sandbox %s: %v", sb.ID, w.err)
		}
	default:
	}
	return nil
}

// mapRuntimeErr turns an engine error into the API's answer. Messages
// name the sandbox and the engine address, never container ids.
func (m *Manager) mapRuntimeErr(id string, err error) error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, container.ErrEngineUnavailable):
		return errorf(CodeServiceUnavailable, "the sandbox service is unavailable: the container engine at %s does not answer; retry later", m.rt.Address())
	case errors.Is(err, container.ErrNotFound), errors.Is(err, container.ErrNotRunning):
		return errorf(CodeNotRunning, "sandbox %s is not running", id)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return errorf(CodeServiceUnavailable, "the request was cancelled before sandbox %s answered", id)
	case errors.Is(err, container.ErrExecNotStarted):
		return errorf(CodeServiceUnavailable, "sandbox %s could not start the process: nothing ran, so the request can be sent again", id)
	case errors.Is(err, container.ErrAgentLost):
		return errorf(CodeSandboxUnresponsive, "a process in sandbox %s stopped, closed or replaced its agent, so the request got no answer; "+unresponsiveAdvice, id)
	default:
		return errorf(CodeInternal, "sandbox %s: %v", id, strings.TrimSpace(err.Error()))
	}
}
