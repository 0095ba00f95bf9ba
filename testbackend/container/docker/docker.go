// Package docker is the runtime that runs sandboxes as Docker containers
// under the gVisor runtime (runsc): a container.Runtime. It knows nothing
// about accounts, records or HTTP: the sandbox package decides what to
// run, this package only drives the engine. Where make setup enabled it,
// the sandboxes' network is wired by the backend itself (package netwire)
// instead of by the engine.
package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/client"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/netwire"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/ocispec"
)

// Defaults that match what scripts/setup.sh creates.
const (
	// DefaultHost is the engine that `make setup` starts.
	DefaultHost = "unix:///run/rarecloud/docker.sock"
	// DefaultNetwork is the sandbox network `make setup` creates: egress to
	// the public internet only, nothing in, no host, no private ranges.
	DefaultNetwork = "rarecloud-sandbox"
	// DefaultRuntimeName is the OCI runtime registered for gVisor.
	DefaultRuntimeName = "runsc"
	// NetworkNone gives a sandbox no network at all (loopback only).
	NetworkNone = "none"

	// PullMissing pulls images that are not present; PullNever never pulls.
	PullMissing = "missing"
	PullNever   = "never"

	// SandboxUser is the uid:gid every sandbox process runs as.
	SandboxUser = "10001:10001"
	// SandboxHome is the sandbox user's home and the working directory.
	SandboxHome = "/home/user"
)

// Options configures New. Zero values take the defaults.
type Options struct {
	// Host is the engine address. Empty: $DOCKER_HOST (with the other
	// DOCKER_* variables), else DefaultHost when its socket exists, else the
	// client's default.
	Host string
	// RuntimeName is the OCI runtime for sandboxes, default "runsc".
	RuntimeName string
	// Network is the Docker network for sandboxes: "" means DefaultNetwork,
	// "none" means no network.
	Network string
	// PullPolicy is "missing" (default) or "never".
	PullPolicy string
	// Instance is the owner id put on LabelInstance. Required: List only ever
	// returns containers carrying it, so backends sharing an engine never
	// touch each other's containers.
	Instance string
	// DNS servers for sandboxes (IP addresses). Empty: on the network make
	// setup made, the forwarder /etc/rarecloud/network.json names ("dns");
	// elsewhere Docker's default. Either way the sandbox gets a read-only
	// /etc/resolv.conf naming them (see dns.go): Docker's own would say
	// "nameserver 127.0.0.11" on a user-defined network, which under gVisor's
	// network stack is the sandbox's own loopback. Not used with "none".
	DNS []string
	// Agent is the host path of the rarecloud-agent binary: "" means
	// DefaultAgentPath when it exists, AgentNone turns the agent off.
	Agent string
	// EngineNetworking has the engine network sandboxes even where the
	// backend could wire them itself (package netwire): to compare the two.
	EngineNetworking bool
	// EngineAttachOnly has the backend talk to agents over the engine's
	// attach stream only, without their channels (channel.go): to compare
	// the two.
	EngineAttachOnly bool

	// Pulls (registry.go, docker_images.go, image_store.go). AllowRegistries
	// are registries (host[:port], exactly as image references spell them)
	// pulled from whatever their address; any other registry must resolve
	// to public addresses only. Zero values take the defaults.
	AllowRegistries []string
	// RegistryLookupTimeout bounds resolving a registry's name (5s).
	RegistryLookupTimeout time.Duration
	// PullTimeout bounds one pull, shared by every create waiting for it
	// (DefaultPullTimeout).
	PullTimeout time.Duration
	// MaxImageBytes bounds an image unpacked (DefaultMaxImageBytes);
	// MaxDownloadBytes its compressed size as its manifest declares it
	// (DefaultMaxDownloadBytes).
	MaxImageBytes    int64
	MaxDownloadBytes int64
	// ImageBudgetBytes is what the images this runtime pulled may take
	// before unused ones are removed (DefaultImageBudgetBytes).
	ImageBudgetBytes int64
	// MaxPulls bounds the pulls under way at once (DefaultMaxPulls;
	// pull_gate.go).
	MaxPulls int
}

// Runtime is a container.Runtime backed by a Docker engine.
type Runtime struct {
	cli      *client.Client
	host     string
	runtime  string
	network  string
	pull     string
	instance string
	dns      []string
	own      *netwire.Wiring // the backend wires sandboxes itself (package netwire); nil: the engine does

	agentPath string                   // host path of the agent binary; "" runs a shell keepalive and execs through the engine
	sessMu    sync.Mutex               // guards the maps below; never held across an engine call
	sessions  map[string]*agentSession // by container id
	attaching map[string]*attachCall   // attaches in flight, by full container id
	channels  map[string]*agentChannel // channels no attach has taken yet, by full container id
	// channelDir holds the agents' channels; "" drives agents over the
	// attach stream only.
	channelDir string
	closed     bool // Close ran: late attaches are closed at once
	// attachTimeout bounds an attach to an agent (tests shorten it).
	attachTimeout time.Duration
	// agentWriteStall bounds the wait for an agent to take a chunk of a
	// request line (agentstall.go; tests shorten it).
	agentWriteStall time.Duration
	// brokenLine marks containers whose attach stream holds half a request
	// line (agentstall.go), by full container id.
	brokenLine map[string]bool
	noAgent    map[string]bool   // containers known to have no agent
	killed     map[string]string // containers this runtime killed, with why (see hostileAgent)

	registries       *registryPolicy
	pullTimeout      time.Duration
	maxImageBytes    int64
	maxDownloadBytes int64
	imageBudget      int64
	imageHold        time.Duration          // tests shorten it
	imgMu            sync.Mutex             // guards the three below; never held across an engine call
	flights          map[string]*pullFlight // pulls under way or waiting for a slot, by reference
	pulled           map[string]*pulled     // images this runtime pulled, by reference
	gate             *pullGate              // the pulls' slots and accounts (pull_gate.go)

	platformMu   sync.Mutex // guards the three below
	platformOS   string     // the engine's, once asked (image_policy.go)
	platformArch string
	facts        engineFacts // the engine's Info, once asked (cpus.go)

	weightMu     sync.Mutex               // guards the three below; never held across an engine call
	weightFiles  map[string]cpuWeightFile // containers' CPU weight files, by id (cpuweight.go)
	parentWeight cpuWeightFile            // the own cgroup parent's, once a container under it was weighed (cgroupparent.go)
	totalWeight  int                      // the parent's weight last asked for, 0: none
}

var _ container.Runtime = (*Runtime)(nil)

// New builds a client for the engine. It does not contact the engine:
// call Ping to check it answers.
func New(opts Options) (*Runtime, error) {
	if strings.TrimSpace(opts.Instance) == "" {
		return nil, errors.New("runtime: docker.Options.Instance is required (it scopes List and cleanup to this backend's containers)")
	}
	pull := opts.PullPolicy
	switch pull {
	case "":
		pull = PullMissing
	case PullMissing, PullNever:
	default:
		return nil, fmt.Errorf("runtime: pull policy %q is not %q or %q", pull, PullMissing, PullNever)
	}
	rt := opts.RuntimeName
	if rt == "" {
		rt = DefaultRuntimeName
	}
	network := opts.Network
	if network == "" {
		network = DefaultNetwork
	}
	dns, err := sandboxDNS(network, opts.DNS)
	if err != nil {
		return nil, err
	}
	registries, err := newRegistryPolicy(opts.AllowRegistries, opts.RegistryLookupTimeout)
	if err != nil {
		return nil, err
	}

	agentPath := resolveAgent(opts.Agent)
	if agentPath != "" {
		if err := checkAgent(context.Background(), agentPath); err != nil {
			return nil, err
		}
	}
	channelDir, err := channelDirFor(ocispec.ChannelDir, opts.EngineAttachOnly, agentPath)
	if err != nil {
		return nil, err
	}

	copts := []client.Opt{client.WithAPIVersionNegotiation(), client.WithUserAgent("rarecloud-testbackend")}
	switch {
	case opts.Host != "":
		copts = append(copts, client.WithHost(opts.Host))
	case os.Getenv(client.EnvOverrideHost) != "":
		copts = append(copts, client.FromEnv)
	default:
		if fi, err := os.Stat(strings.TrimPrefix(DefaultHost, "unix://")); err == nil && fi.Mode()&os.ModeSocket != 0 {
			copts = append(copts, client.WithHost(DefaultHost))
		}
	}
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, fmt.Errorf("runtime: docker client: %w", err)
	}
	var own *netwire.Wiring
	if !opts.EngineNetworking && network != NetworkNone {
		if own, err = ownNetFor(network, cli.DaemonHost()); err != nil {
			_ = cli.Close()
			return nil, err
		}
	}
	return &Runtime{
		cli:      cli,
		host:     cli.DaemonHost(),
		runtime:  rt,
		network:  network,
		pull:     pull,
		instance: opts.Instance,
		dns:      dns,
		own:      own,

		agentPath:   agentPath,
		sessions:    map[string]*agentSession{},
		attaching:   map[string]*attachCall{},
		channels:    map[string]*agentChannel{},
		channelDir:  channelDir,
		weightFiles: map[string]cpuWeightFile{},

		attachTimeout:   defaultAttachTimeout,
		agentWriteStall: defaultAgentWriteStall,
		brokenLine:      map[string]bool{},
		noAgent:         map[string]bool{},
		killed:          map[string]string{},

		registries:       registries,
		pullTimeout:      orDefault(opts.PullTimeout, container.DefaultPullTimeout),
		maxImageBytes:    orDefault(opts.MaxImageBytes, DefaultMaxImageBytes),
		maxDownloadBytes: orDefault(opts.MaxDownloadBytes, DefaultMaxDownloadBytes),
		imageBudget:      orDefault(opts.ImageBudgetBytes, DefaultImageBudgetBytes),
		imageHold:        imageHold,
		flights:          map[string]*pullFlight{},
		pulled:           map[string]*pulled{},
		gate:             newPullGate(opts.MaxPulls),
	}, nil
}

func orDefault[T int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Address is the engine address, for error messages.
func (d *Runtime) Address() string { return d.host }

// Instance is the owner id this runtime labels and lists containers by.
func (d *Runtime) Instance() string { return d.instance }

// Close releases the engine client, and this runtime's own cgroup
// parent when no container is left under it.
func (d *Runtime) Close() error {
	d.sessMu.Lock()
	d.closed = true
	d.sessMu.Unlock()
	d.closeSessions()
	d.closeChannels()
	if d.mayOwnParent() {
		_ = RemoveCgroupParent(d.instance, false) // best effort: the reaper tries again
	}
	return d.cli.Close()
}

// Ping checks that the engine answers within ctx.
func (d *Runtime) Ping(ctx context.Context) error {
	if _, err := d.cli.Ping(ctx); err != nil {
		return fmt.Errorf("%w: no answer from %s: %v", container.ErrEngineUnavailable, d.host, err)
	}
	return nil
}
