// Package sandbox is the sandbox lifecycle: create (with idempotency),
// pending → running → exited/terminated, expiry, retention, exec and files,
// and reconciliation with the engine after a restart. It owns the live
// records; the store persists them and the runtime runs them.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/runtime"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Statuses of a sandbox.
const (
	StatusPending    = "pending"
	StatusRunning    = "running"
	StatusExited     = "exited"
	StatusTerminated = "terminated"
)

// Modes of the backend.
const (
	ModeReal = "real"
	ModeTest = "test"
)

// Config configures a Manager.
type Config struct {
	Mode      string          // ModeReal or ModeTest
	Runtime   runtime.Runtime // required in ModeReal
	Store     *store.Store
	Templates []Template // default DefaultTemplates()
	// Retention keeps exited and terminated records readable; default 24h.
	Retention time.Duration
	// IdempotencyTTL keeps idempotency keys; default 24h.
	IdempotencyTTL time.Duration
	// PullTimeout bounds an image pull during create; default 60s.
	PullTimeout time.Duration
	// HomeBytes and TmpBytes override the templates' disk sizes (tests use small ones).
	HomeBytes int64
	TmpBytes  int64
	// MaxProcs is the process limit of the sandbox user; default 512.
	MaxProcs int64
	// PoolSize is how many warm containers each template keeps; 0 for none.
	PoolSize int
	// VCPULimit caps the vCPUs of each account's live sandboxes (default
	// DefaultVCPULimit); AccountVCPULimits overrides it per account.
	VCPULimit         float64
	AccountVCPULimits map[string]float64
	// Egress enforces egress policies; nil: egress control is off.
	Egress EgressEnforcer
	// MinIdleTimeout is the least idleTimeoutMs (smaller ones are raised
	// to it); default DefaultMinIdleTimeout. Tests lower it.
	MinIdleTimeout time.Duration
	Logger         *slog.Logger
}

// Manager owns every sandbox of one backend instance.
type Manager struct {
	cfg       Config
	rt        runtime.Runtime
	st        *store.Store
	log       *slog.Logger
	templates map[string]Template
	order     []string

	ctx    context.Context // cancelled by Close; background work stops with it
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	boxes    map[string]*store.Sandbox
	timers   map[string]*time.Timer
	watching map[string]bool
	starting map[string]bool
	ending   map[string]bool // expiring: their container is being removed
	busy     map[string]int  // operations under way (lifetime.go): the idle clock waits for them
	idem     map[string]*idemEntry
	pools    map[string]*warmPool
	// changed holds, per sandbox, a channel closed at its next status change.
	changed map[string]chan struct{}
	// poolChanged is closed and replaced whenever a pool gains a container.
	poolChanged chan struct{}

	engine engineState
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
	if cfg.Mode == ModeReal && cfg.Runtime == nil {
		return nil, errors.New("sandbox: real mode needs a runtime")
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
	if cfg.PullTimeout <= 0 {
		cfg.PullTimeout = 60 * time.Second
	}
	if cfg.VCPULimit <= 0 {
		cfg.VCPULimit = DefaultVCPULimit
	}
	if cfg.MinIdleTimeout <= 0 {
		cfg.MinIdleTimeout = DefaultMinIdleTimeout
	}
	if cfg.MaxProcs <= 0 {
		cfg.MaxProcs = 512
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg:       cfg,
		rt:        cfg.Runtime,
		st:        cfg.Store,
		log:       cfg.Logger,
		templates: map[string]Template{},
		ctx:       ctx,
		cancel:    cancel,
		boxes:     map[string]*store.Sandbox{},
		timers:    map[string]*time.Timer{},
		watching:  map[string]bool{},
		starting:  map[string]bool{},
		ending:    map[string]bool{},
		busy:      map[string]int{},
		idem:      map[string]*idemEntry{},
		pools:     map[string]*warmPool{},
		changed:   map[string]chan struct{}{},

		poolChanged: make(chan struct{}),
	}
	for _, t := range cfg.Templates {
		m.templates[t.Name] = t
		m.order = append(m.order, t.Name)
	}
	return m, nil
}

// Mode is ModeReal or ModeTest.
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
}

// View is a sandbox as the API shows it.
type View struct {
	ID                string            `json:"id"`
	Status            string            `json:"status"`
	Template          string            `json:"template"`
	Image             string            `json:"image"`
	CreatedAt         string            `json:"createdAt"`
	TimeoutMs         int64             `json:"timeoutMs"`
	ExpiresAt         string            `json:"expiresAt"`
	RunMode           bool              `json:"runMode"`
	Entrypoint        []string          `json:"entrypoint,omitempty"`
	Cmd               []string          `json:"cmd,omitempty"`
	Labels            map[string]string `json:"labels"`
	EnvKeys           []string          `json:"envKeys"`
	ExitCode          *int              `json:"exitCode"`
	EndedAt           string            `json:"endedAt,omitempty"`
	TerminationReason string            `json:"terminationReason,omitempty"`
	EgressMode        string            `json:"egressMode"`
	EgressAllowlist   []string          `json:"egressAllowlist,omitempty"`
	// Extensions of v1 (lifetime.go).
	IdleTimeoutMs      int64  `json:"idleTimeoutMs,omitempty"`
	IdleExpiresAt      string `json:"idleExpiresAt,omitempty"`
	TerminatedAt       string `json:"terminatedAt,omitempty"`
	TerminationMessage string `json:"terminationMessage,omitempty"`
}

// TimeFormat is how the API writes instants: UTC, millisecond precision.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

func view(sb *store.Sandbox) View {
	v := View{
		ID:                sb.ID,
		Status:            sb.Status,
		Template:          sb.Template,
		Image:             sb.Image,
		CreatedAt:         sb.CreatedAt.UTC().Format(TimeFormat),
		TimeoutMs:         sb.TimeoutMs,
		ExpiresAt:         sb.ExpiresAt.UTC().Format(TimeFormat),
		RunMode:           sb.RunMode,
		Entrypoint:        sb.Entrypoint,
		Cmd:               sb.Cmd,
		Labels:            map[string]string{},
		EnvKeys:           envKeys(sb),
		TerminationReason: sb.TerminationReason,
		EgressMode:        egressMode(sb),
		EgressAllowlist:   sb.EgressAllowlist,

		IdleTimeoutMs:      sb.IdleTimeoutMs,
		TerminationMessage: sb.TerminationMessage,
	}
	if sb.IdleExpiresAt != nil && sb.Status == StatusRunning {
		v.IdleExpiresAt = sb.IdleExpiresAt.UTC().Format(TimeFormat)
	}
	if sb.Status == StatusTerminated && sb.EndedAt != nil {
		v.TerminatedAt = sb.EndedAt.UTC().Format(TimeFormat)
	}
	for k, val := range sb.Labels {
		v.Labels[k] = val
	}
	if sb.ExitCode != nil {
		c := *sb.ExitCode
		v.ExitCode = &c
	}
	if sb.EndedAt != nil {
		v.EndedAt = sb.EndedAt.UTC().Format(TimeFormat)
	}
	return v
}

// Get returns one of the account's sandboxes. Another account's sandbox is
// not found, exactly like one that does not exist.
func (m *Manager) Get(account, id string) (View, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.boxes[id]
	if sb == nil || sb.Account != account {
		return View{}, notFound(id)
	}
	return view(sb), nil
}

// List returns the account's sandboxes that carry every given label,
// oldest first.
func (m *Manager) List(account string, labels map[string]string) []View {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []View{}
	for _, sb := range m.boxes {
		if sb.Account != account || !hasLabels(sb.Labels, labels) {
			continue
		}
		out = append(out, view(sb))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt < out[j].CreatedAt
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// notifyLocked wakes everyone waiting for the sandbox's status to change.
func (m *Manager) notifyLocked(id string) {
	if ch := m.changed[id]; ch != nil {
		close(ch)
		delete(m.changed, id)
	}
}

// WaitStatus waits until the sandbox has one of the statuses, has ended,
// or is gone, or until ctx ends, and returns it as it then is. The wait is
// an event: every status change closes a channel, nothing polls.
func (m *Manager) WaitStatus(ctx context.Context, account, id string, want []string) (View, error) {
	for {
		m.mu.Lock()
		sb := m.boxes[id]
		if sb == nil || sb.Account != account {
			m.mu.Unlock()
			return View{}, notFound(id)
		}
		if slices.Contains(want, sb.Status) || sb.Status == StatusExited || sb.Status == StatusTerminated {
			v := view(sb)
			m.mu.Unlock()
			return v, nil
		}
		ch := m.changed[id]
		if ch == nil {
			ch = make(chan struct{})
			m.changed[id] = ch
		}
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return m.Get(account, id)
		}
	}
}

// Delete stops and removes the sandbox; afterwards its id answers 404.
func (m *Manager) Delete(ctx context.Context, account, id string) error {
	m.mu.Lock()
	sb := m.boxes[id]
	if sb == nil || sb.Account != account {
		m.mu.Unlock()
		return notFound(id)
	}
	if err := m.forgetLocked(sb); err != nil {
		m.mu.Unlock()
		return err
	}
	m.mu.Unlock()
	return m.removeContainer(ctx, sb)
}

// forgetLocked drops a record from memory and disk. The record goes before
// the container: a crash in between leaves an orphan container, which the
// next start removes, never a record that points at nothing.
func (m *Manager) forgetLocked(sb *store.Sandbox) error {
	if err := m.st.DeleteSandbox(sb.ID); err != nil {
		return errorf(CodeInternal, "could not delete the record of sandbox %s: %v", sb.ID, err)
	}
	m.dropLocked(sb)
	return nil
}

// dropLocked forgets a record in memory only.
func (m *Manager) dropLocked(sb *store.Sandbox) {
	delete(m.boxes, sb.ID)
	m.notifyLocked(sb.ID)
	if t := m.timers[sb.ID]; t != nil {
		t.Stop()
		delete(m.timers, sb.ID)
	}
}

// removeContainer removes the sandbox's container by name, so a container
// whose start was still in flight goes too.
func (m *Manager) removeContainer(ctx context.Context, sb *store.Sandbox) error {
	if m.rt == nil {
		return nil
	}
	if sb.ContainerID != "" {
		// A claimed warm container has a pool name, not the sandbox's.
		if err := m.rt.Remove(ctx, sb.ContainerID); err != nil && !errors.Is(err, runtime.ErrEngineUnavailable) {
			return errorf(CodeInternal, "could not remove the container of sandbox %s: %v", sb.ID, err)
		}
	}
	if err := m.rt.Remove(ctx, containerName(sb.ID)); err != nil {
		if errors.Is(err, runtime.ErrEngineUnavailable) {
			// The record is gone; reconciliation removes the container
			// once the engine is back.
			m.log.Warn("container removal deferred: engine unavailable", "sandbox", sb.ID, "err", err)
			return nil
		}
		return errorf(CodeInternal, "could not remove the container of sandbox %s: %v", sb.ID, err)
	}
	m.releaseEgress(sb.ID) // only once nothing of the sandbox runs
	return nil
}

func containerName(id string) string { return "rarecloud-" + id }

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

func newID() string {
	var b [15]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return "sbx-" + idEncoding.EncodeToString(b[:])
}

// persistLocked writes a record; a failed write is logged and reported.
func (m *Manager) persistLocked(sb *store.Sandbox) error {
	if err := m.st.PutSandbox(sb); err != nil {
		m.log.Error("persist sandbox", "sandbox", sb.ID, "err", err)
		return errorf(CodeInternal, "could not save sandbox %s: %v", sb.ID, err)
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
	case errors.Is(err, runtime.ErrEngineUnavailable):
		return errorf(CodeServiceUnavailable, "the sandbox service is unavailable: the container engine at %s does not answer; retry later", m.rt.Address())
	case errors.Is(err, runtime.ErrNotFound), errors.Is(err, runtime.ErrNotRunning):
		return errorf(CodeNotRunning, "sandbox %s is not running", id)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return errorf(CodeServiceUnavailable, "the request was cancelled before sandbox %s answered", id)
	default:
		return errorf(CodeInternal, "sandbox %s: %v", id, strings.TrimSpace(err.Error()))
	}
}

// envKeys are the names of the sandbox's environment variables; records
// written before EnvKeys existed have only Env.
func envKeys(sb *store.Sandbox) []string {
	if sb.EnvKeys != nil {
		return sb.EnvKeys
	}
	return sortedKeys(sb.Env)
}
