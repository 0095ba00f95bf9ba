// Package testbackend wires the RareCloud API v1 test backend together:
// store, runtime, sandbox lifecycle and HTTP API. The mode is decided here
// and only here: it picks the runtime (Docker under gVisor, or package
// testmode's, which runs nothing); the lifecycle is the same in both. The command in
// cmd/rarecloud-testbackend and the provider's acceptance tests both start
// it through New.
package testbackend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/apispec"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/egress"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/hostnet"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/httpserver"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/operator"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/testmode"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/testmode/takeover"
)

// Token is one API token the backend accepts.
type Token struct {
	Token   string   `json:"token"`
	Account string   `json:"account"`
	Scopes  []string `json:"scopes"`
}

// Config configures a backend. Zero values take the documented defaults.
type Config struct {
	Listen string // default 127.0.0.1:8080; "127.0.0.1:0" picks a free port
	// DataDir is where records live; default operator.DefaultDataDir().
	// Created 0700 when missing; an existing one must be the backend
	// user's, writable by no one else, and not a symbolic link
	// (operator.CheckDataDir).
	DataDir string
	// TokensFile is JSON {"tokens":[...]}, ignored when Tokens is set:
	// each token listed once, the file readable by the backend's user
	// alone (mode 0600 or tighter).
	TokensFile string
	// AllowSharedTokensFile accepts a TokensFile that its group or others
	// may read or write (--allow-shared-tokens-file); without it such a
	// file is refused: anyone who can read it has every token in it.
	AllowSharedTokensFile bool
	Tokens                []Token // in-process callers pass tokens directly; each token once
	Mode                  string  // "real" (default) or "test"
	DockerHost            string  // default $DOCKER_HOST, else the engine make setup started
	Runtime               string  // OCI runtime, default "runsc"
	Pull                  string  // "missing" (default) or "never"
	// Pulls of custom images (IMAGES.md, "Where images come from"):
	// AllowRegistries are registries (host[:port], exactly as image
	// references spell them) pulled from whatever address they have; any
	// other must resolve to public addresses only. PullTimeout bounds a
	// pull (default container.DefaultPullTimeout); MaxImageBytes an image
	// unpacked and MaxDownloadBytes its declared compressed size;
	// ImageBudgetBytes what pulled images may take before unused ones go;
	// MaxPulls the pulls downloading at once.
	// Zero values take the defaults (container.DefaultPullTimeout, docker.Default*).
	AllowRegistries  []string
	PullTimeout      time.Duration
	MaxImageBytes    int64
	MaxDownloadBytes int64
	ImageBudgetBytes int64
	MaxPulls         int
	Network          string        // Docker network for sandboxes; default the one make setup made, "none" for no network
	Retention        time.Duration // how long exited run-mode records stay readable; default 24h
	// MaxRetainedPerAccount caps each account's ended sandboxes kept for
	// Retention (past it the oldest, by end, are forgotten early);
	// MaxIdempotencyKeysPerAccount its idempotency keys (the oldest
	// forgotten first). The Bytes caps bound what each keeps, the same
	// way. MaxRunningExecKeysPerAccount caps its commands with an
	// Idempotency-Key running at once, MaxExecAnswerBytesPerAccount the
	// answers its finished ones keep. 0 for the sandbox package's
	// defaults (sandbox.DefaultMax*).
	MaxRetainedPerAccount         int
	MaxRetainedBytesPerAccount    int64
	MaxIdempotencyKeysPerAccount  int
	MaxIdempotencyBytesPerAccount int64
	MaxRunningExecKeysPerAccount  int
	MaxExecAnswerBytesPerAccount  int64
	// HomeBytes and TmpBytes override the templates' writable area sizes.
	HomeBytes int64
	TmpBytes  int64
	// PoolSize is how many warm containers each template keeps ready; 0 for none.
	PoolSize int
	// MaxInFlight is the per-account limit of concurrent requests (429 past it); 0 for the default.
	MaxInFlight int
	// Agent is the host path of the sandbox agent; default the one make
	// setup installs ("none": commands go through the engine's exec).
	Agent string
	// AgentAttachOnly drives agents over the engine's attach stream only,
	// not over their own sockets (docker.Options.EngineAttachOnly).
	AgentAttachOnly bool
	// ValidateResponses checks every answer against openapi.yaml before it
	// goes out and turns one that does not match into a 500 naming the
	// mismatch: test runs set it, so that no test passes on an undocumented
	// answer.
	ValidateResponses bool
	// Ephemeral says no backend will start again on this data directory
	// (a test run's shared backend): once this one is gone, whether closed
	// or killed, any backend that starts reaps its containers.
	Ephemeral bool
	// VCPULimit caps the vCPUs of each account's live sandboxes; 0 for
	// sandbox.DefaultVCPULimit. Accounts (or the tokens file's "accounts")
	// override it per account.
	VCPULimit float64
	Accounts  []Account
	// Host capacity (sandbox/hostcap.go): HostMemoryBytes is the machine's
	// memory (0: MemTotal; negative: no host bound), HostMemoryReserve
	// what sandboxes leave to the host (0: 2 GiB), MemoryOvercommit how far
	// the sandboxes' memory limits may add up past the rest (0: 4),
	// HostShare the part of that one account may hold (0: 0.5).
	HostMemoryBytes   int64
	HostMemoryReserve int64
	MemoryOvercommit  float64
	HostShare         float64
	// DiskReserve is the free space creates leave on the data directory's
	// file system (503 HOST_CAPACITY_EXHAUSTED below it; 0:
	// sandbox.DefaultDiskReserve, 1 GiB; negative: no bound).
	DiskReserve int64
	// StartSlots is how many container starts run at once, in turns across
	// accounts (0: sandbox.DefaultStartSlots); StartShare how many of them
	// one account runs while other accounts have live sandboxes (0:
	// sandbox.DefaultStartShare()), and StartDuty the part of the time its
	// starts may hold them then (0: sandbox.DefaultStartDuty).
	StartSlots int
	StartShare int
	StartDuty  float64
	// TransferShare is how many file reads and writes one account runs at
	// once while other accounts have live sandboxes (0:
	// sandbox.DefaultTransferShare).
	TransferShare int
	// TransferRate is how many bytes a second one account's file reads
	// and writes move while other accounts have live sandboxes (default
	// sandbox.DefaultTransferRate).
	TransferRate int
	// Egress control (package egress, startup.go): EgressControl is "auto" (default: on when
	// the machine supports it), "on" (start fails when it cannot) or "off";
	// EgressDNSUpstream overrides where the egress DNS forwarder sends
	// allowed names (default the sandboxes' forwarder make setup runs).
	EgressControl     string
	EgressDNSUpstream string
	// QueueWait is how long a request over MaxInFlight waits in line
	// without the line moving before the 429; 0 means
	// api.DefaultQueueWait, negative means no wait.
	QueueWait time.Duration
	// QueueWaitMax is the longest a request waits in line in all; 0 means
	// api.DefaultQueueWaitMax.
	QueueWaitMax time.Duration
	// MinIdleTimeout is the least idleTimeoutMs (smaller ones are raised
	// to it); 0 for the product's 90 s. A test knob: lower it only to test
	// idle timeouts quickly.
	MinIdleTimeout time.Duration
	// HTTP server limits (package httpserver). BodyReadTimeout bounds
	// the reading of one request, headers and body, from its first byte:
	// a body not in by then is answered 408 REQUEST_TIMEOUT and the
	// connection closed, however slowly the client keeps sending. It ends
	// once the body is read, so it never cuts a long poll or a long
	// command. 0 means httpserver.DefaultBodyReadTimeout (60 s).
	BodyReadTimeout time.Duration
	// ConnIdleTimeout closes a keep-alive connection that has sent no new
	// request for that long; 0 means httpserver.DefaultConnIdleTimeout
	// (2 min).
	ConnIdleTimeout time.Duration
	// MaxConnsPerAddr bounds the open connections from one client IP
	// address; past it a new connection is closed as soon as it is
	// accepted. 0 means httpserver.DefaultMaxConnsPerAddr (256), negative
	// no bound.
	MaxConnsPerAddr int
	Logger          *slog.Logger
}

// Egress control settings of Config.EgressControl.
const (
	EgressAuto = egress.ControlAuto
	EgressOn   = egress.ControlOn
	EgressOff  = egress.ControlOff
)

// Account holds per-account settings.
type Account struct {
	Account   string  `json:"account"`
	VCPULimit float64 `json:"vcpuLimit"`
}

// Backend is a running test backend.
type Backend struct {
	url      string
	devToken string
	// devTokenNew is true when this start created the development token.
	devTokenNew bool
	srv         *http.Server
	mgr         *sandbox.Manager
	rt          container.Runtime
	docker      *docker.Runtime // rt in real mode; nil in test mode
	stopSweep   context.CancelFunc
	swept       chan struct{} // closed when the wiring sweeper is done
	lease       *instance.Lease
	egress      *egress.Controller
	egressWhy   string // why there is no egress control
	done        chan struct{}
}

// TestModeDir is where, inside the data directory, the test mode's
// runtime keeps its containers and their files.
const TestModeDir = "testmode"

// DevTokenFile is where a backend without configured tokens keeps its
// development token, inside the data directory.
const DevTokenFile = "dev-token"

// New starts a backend: it opens the store, connects to the engine,
// reconciles, and starts serving. Close stops it.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:8080"
	}
	var err error
	if cfg.DataDir, err = operator.ResolveDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if cfg.Mode == "" {
		cfg.Mode = sandbox.ModeReal
	}
	if cfg.Runtime == "" {
		cfg.Runtime = "runsc"
	}
	if cfg.Pull == "" {
		cfg.Pull = "missing"
	}
	if cfg.Pull != "missing" && cfg.Pull != "never" {
		return nil, fmt.Errorf("pull must be missing or never, got %q", cfg.Pull)
	}
	if cfg.Mode != sandbox.ModeReal && cfg.Mode != sandbox.ModeTest {
		return nil, fmt.Errorf("mode must be real or test, got %q", cfg.Mode)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = httpserver.DefaultBodyReadTimeout
	}
	if cfg.ConnIdleTimeout <= 0 {
		cfg.ConnIdleTimeout = httpserver.DefaultConnIdleTimeout
	}
	if cfg.MaxConnsPerAddr == 0 {
		cfg.MaxConnsPerAddr = httpserver.DefaultMaxConnsPerAddr
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := operator.CheckDataDir(dataDir); err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(dataDir, "records"))
	if err != nil {
		return nil, err
	}
	b := &Backend{done: make(chan struct{})}
	tokens, accounts, err := b.loadTokens(cfg, dataDir)
	if err != nil {
		return nil, err
	}
	limits, err := accountLimits(append(accounts, cfg.Accounts...))
	if err != nil {
		return nil, err
	}

	// The mode is chosen here, once: it picks the runtime (and whether
	// warm containers are kept); the lifecycle is the same in both.
	poolSize := cfg.PoolSize
	switch cfg.Mode {
	case sandbox.ModeTest:
		rt, err := testmode.Open(filepath.Join(dataDir, TestModeDir))
		if err != nil {
			return nil, err
		}
		if err := takeover.Records(rt, st); err != nil {
			return nil, err
		}
		b.rt = rt
		poolSize = 0 // nothing to warm: its containers start at once
	case sandbox.ModeReal:
		if err := hostnet.CheckFirewall(ctx, cfg.Network); err != nil {
			return nil, err
		}
		d, err := docker.New(docker.Options{
			Host:             cfg.DockerHost,
			RuntimeName:      cfg.Runtime,
			Network:          cfg.Network,
			PullPolicy:       cfg.Pull,
			AllowRegistries:  cfg.AllowRegistries,
			PullTimeout:      cfg.PullTimeout,
			MaxImageBytes:    cfg.MaxImageBytes,
			MaxDownloadBytes: cfg.MaxDownloadBytes,
			ImageBudgetBytes: cfg.ImageBudgetBytes,
			MaxPulls:         cfg.MaxPulls,
			Instance:         instance.ID(dataDir),
			Agent:            cfg.Agent,
			EngineAttachOnly: cfg.AgentAttachOnly,
		})
		if err != nil {
			return nil, fmt.Errorf("container engine: %w", err)
		}
		b.rt, b.docker = d, d
		sweepCtx, stop := context.WithCancel(context.Background())
		b.stopSweep, b.swept = stop, make(chan struct{})
		go func() {
			defer close(b.swept)
			d.KeepSwept(sweepCtx, docker.DefaultSweepEvery, cfg.Logger)
		}()
		if err := b.startLease(ctx, instance.ID(dataDir), dataDir, cfg.Ephemeral, cfg.Logger); err != nil {
			b.closeRuntime()
			return nil, err
		}
		if b.egress, b.egressWhy, err = egress.StartOnHost(egress.HostSetup{
			Control:     cfg.EgressControl,
			Instance:    instance.ID(dataDir),
			Network:     cfg.Network,
			NoNetwork:   cfg.Network == docker.NetworkNone,
			DNSUpstream: cfg.EgressDNSUpstream,
			Used: func(ctx context.Context) ([]netip.Addr, error) {
				_, _, used, err := d.NetworkAddresses(ctx)
				return used, err
			},
			Logger: cfg.Logger,
		}); err != nil {
			b.closeRuntime()
			return nil, err
		}
	}
	b.mgr, err = sandbox.New(sandbox.Config{
		Mode:           cfg.Mode,
		Runtime:        b.rt,
		Store:          st,
		Retention:      cfg.Retention,
		PullTimeout:    cfg.PullTimeout,
		MinIdleTimeout: cfg.MinIdleTimeout,
		HomeBytes:      cfg.HomeBytes,
		TmpBytes:       cfg.TmpBytes,
		PoolSize:       poolSize,
		Logger:         cfg.Logger,

		MaxRetainedPerAccount:         cfg.MaxRetainedPerAccount,
		MaxRetainedBytesPerAccount:    cfg.MaxRetainedBytesPerAccount,
		MaxIdempotencyKeysPerAccount:  cfg.MaxIdempotencyKeysPerAccount,
		MaxIdempotencyBytesPerAccount: cfg.MaxIdempotencyBytesPerAccount,
		MaxRunningExecKeysPerAccount:  cfg.MaxRunningExecKeysPerAccount,
		MaxExecAnswerBytesPerAccount:  cfg.MaxExecAnswerBytesPerAccount,

		VCPULimit:         cfg.VCPULimit,
		AccountVCPULimits: limits,
		HostMemoryBytes:   cfg.HostMemoryBytes,
		HostMemoryReserve: cfg.HostMemoryReserve,
		MemoryOvercommit:  cfg.MemoryOvercommit,
		HostShare:         cfg.HostShare,
		Addresses:         b.addressPool(),
		NetworkLeases:     b.networkLeases(),
		DiskReserve:       cfg.DiskReserve,
		StartSlots:        cfg.StartSlots,
		StartShare:        cfg.StartShare,
		StartDuty:         cfg.StartDuty,
		TransferShare:     cfg.TransferShare,
		TransferRate:      cfg.TransferRate,
		Egress:            b.egressEnforcer(),
	})
	if err != nil {
		b.closeRuntime()
		return nil, err
	}
	if err := b.mgr.Start(ctx); err != nil {
		b.mgr.Close()
		b.closeRuntime()
		return nil, err
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		b.mgr.Close()
		b.closeRuntime()
		return nil, err
	}
	b.url = "http://" + ln.Addr().String() + "/v1"
	var handler http.Handler = api.New(b.mgr, tokens, cfg.Logger, api.Options{MaxInFlight: cfg.MaxInFlight, QueueWait: cfg.QueueWait, QueueWaitMax: cfg.QueueWaitMax, BodyReadTimeout: cfg.BodyReadTimeout})
	if cfg.ValidateResponses {
		handler = apispec.Validating(handler, cfg.Logger)
	}
	b.srv = httpserver.New(handler, cfg.BodyReadTimeout, cfg.ConnIdleTimeout)
	served := httpserver.LimitConns(ln, cfg.MaxConnsPerAddr, cfg.Logger)
	go func() {
		defer close(b.done)
		if err := b.srv.Serve(served); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Logger.Error("serve", "err", err)
		}
	}()
	return b, nil
}

// addressPool is how many sandbox addresses the runtime leases from; 0
// (no bound) when the engine hands them out, or nothing runs.
func (b *Backend) addressPool() int {
	if b.docker != nil {
		return b.docker.AddressPool()
	}
	return 0
}

// networkLeases reads how many sandbox addresses every backend on the
// network holds; nil when that is not known.
func (b *Backend) networkLeases() func() (int, error) {
	if b.docker != nil {
		return b.docker.NetworkLeases()
	}
	return nil
}

// URL is the API base, for example http://127.0.0.1:8080/v1.
func (b *Backend) URL() string { return b.url }

// DevToken is the development token used when no tokens were configured.
func (b *Backend) DevToken() string { return b.devToken }

// DevTokenCreated reports whether this start created the development token.
func (b *Backend) DevTokenCreated() bool { return b.devTokenNew }

// Runtime exposes the engine client (in test mode package testmode's
// runtime), for tests.
func (b *Backend) Runtime() container.Runtime { return b.rt }

// Docker exposes the Docker runtime in real mode (nil in test mode), for
// tests that drive the engine behind the backend, as its reaper.
func (b *Backend) Docker() *docker.Runtime { return b.docker }

// Manager exposes the lifecycle, for tests that need to look behind the API.
func (b *Backend) Manager() *sandbox.Manager { return b.mgr }

// Close stops serving and releases the engine. Sandboxes stay, as records
// and containers, for the next start to pick up.
func (b *Backend) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := b.srv.Shutdown(ctx)
	<-b.done
	b.mgr.Close()
	b.closeRuntime()
	return err
}

func (b *Backend) closeRuntime() {
	if b.stopSweep != nil {
		b.stopSweep()
		<-b.swept
	}
	b.closeEgress()
	if b.rt != nil {
		_ = b.rt.Close()
	}
	b.lease.Release()
}

// startLease takes this instance's lease, then reaps what backends that
// are gone for good left on the engine (see instance.Reap).
func (b *Backend) startLease(ctx context.Context, inst, dataDir string, ephemeral bool, logger *slog.Logger) error {
	l, err := instance.Acquire(inst, dataDir, ephemeral)
	if errors.Is(err, os.ErrPermission) {
		// Not root: no lease, so nothing ever reaps this backend's containers
		// (nor anyone else's from here); it still works.
		logger.Warn("running without an instance lease", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	b.lease = l
	if _, err := instance.Reap(ctx, b.docker, logger); err != nil {
		logger.Warn("reaping the containers of backends that are gone", "err", err)
	}
	return nil
}

// egressEnforcer is what the sandbox manager gets: the controller, or a
// stand-in that explains why there is none.
func (b *Backend) egressEnforcer() sandbox.EgressEnforcer {
	if b.egress != nil {
		return b.egress
	}
	return egress.Unavailable(b.egressWhy)
}

func (b *Backend) closeEgress() {
	if b.egress != nil {
		_ = b.egress.Close()
		b.egress = nil
	}
}

// Egress exposes the egress controller (nil without egress control), for tests.
func (b *Backend) Egress() *egress.Controller { return b.egress }
