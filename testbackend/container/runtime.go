// Package container is the runtime seam: the interface the sandbox
// lifecycle drives (Runtime), what it says to one (Spec, ExecRequest) and
// hears back (Exit, Container, ExecResult), the labels every owned
// container carries, and the errors it maps onto API codes. It imports no
// engine: package docker implements Runtime on a Docker engine under
// gVisor, package testmode one that runs nothing, and another runtime is
// one more package that implements it.
package container

import (
	"context"
	"errors"
	"io"
	"time"
)

// Errors the sandbox package maps onto API codes.
var (
	// ErrEngineUnavailable means the container engine did not answer.
	ErrEngineUnavailable = errors.New("container engine unavailable")
	// ErrImageUnavailable means the image is not present and could not be pulled.
	ErrImageUnavailable = errors.New("image unavailable")
	// ErrNotFound means the container does not exist (any more).
	ErrNotFound = errors.New("container not found")
	// ErrNotRunning means the container exists but is not running.
	ErrNotRunning = errors.New("container not running")
	// ErrCannotWeigh means the runtime cannot weigh containers' CPU here
	// (CPUWeigher): their cgroups are not on this host.
	ErrCannotWeigh = errors.New("cannot weigh the containers' CPU on this host")
	// ErrExecNotStarted wraps an Exec error that came before the process
	// could start: the request never reached the container, or the
	// container's runtime refused to start the process. Any other Exec
	// error may come after the process started.
	ErrExecNotStarted = errors.New("process not started")
	// ErrAgentLost wraps an Exec or file error that came after the
	// request reached the sandbox's agent, when the agent's session broke
	// while the container still ran: the sandbox's own processes stopped,
	// closed or replaced its agent. The request may have run. It is the
	// sandbox's fault, never the engine's: nothing about it says the
	// engine is down.
	ErrAgentLost = errors.New("the sandbox's agent broke off the session")
)

// Labels every owned container carries, so a backend finds its own after a
// crash and never touches another backend's containers on a shared engine.
const (
	LabelManaged   = "io.rarecloud.managed"  // always "true"
	LabelInstance  = "io.rarecloud.instance" // the owning backend instance id
	LabelSandboxID = "io.rarecloud.sandbox"  // the sandbox id (sbx-…)
	LabelPool      = "io.rarecloud.pool"     // set on warm-pool containers (template name)
)

// Spec says what to start. Zero values mean "not set".
type Spec struct {
	Name       string            // container name
	Image      string            // image reference, already resolved
	Entrypoint []string          // run mode: overrides the image's entrypoint
	Cmd        []string          // run mode: overrides the image's command
	RunMode    bool              // false: keepalive process instead of the image's program
	Env        map[string]string // environment of the main process and of every exec
	Labels     map[string]string // engine labels (owner labels are added by the runtime)

	NanoCPUs    int64 // CPU limit in units of 1e-9 CPUs
	MemoryBytes int64 // memory limit
	HomeBytes   int64 // size of the /home/user tmpfs
	TmpBytes    int64 // size of the /tmp tmpfs
	MaxProcs    int64 // process limit for the sandbox user
	// CPUWeight is the container's share of contended CPUs against other
	// containers (CPUWeigher); 0 leaves the engine's default.
	CPUWeight int

	// IPv4 fixes the sandbox's address on its network (egress rules are
	// keyed on it before the container exists); "" lets the engine choose.
	IPv4 string
}

// ExecRequest is one process run inside a running container as the
// sandbox user (uid 10001) in /home/user.
type ExecRequest struct {
	Cmd       []string          // argv; the caller wraps shell commands in sh -c
	Stdin     io.Reader         // optional
	Env       map[string]string // added to the container's environment for this process
	Timeout   time.Duration     // killed after this; 0 means no limit
	MaxOutput int               // per stream; output beyond it is drained and dropped
	Pace      Pacer             // optional: stdin and output move at its pace (pace.go)
}

// ExecResult is what came back. ExitCode is nil when the process was killed
// for running past its timeout.
type ExecResult struct {
	Stdout          []byte
	Stderr          []byte
	ExitCode        *int
	TimedOut        bool
	StdoutTruncated bool
	StderrTruncated bool
	Duration        time.Duration
}

// Exit is how a run-mode container's program ended.
type Exit struct {
	Code int
	Err  error // set when waiting failed (engine gone, container removed)
	// Reason is set when the runtime itself ended the container, and says why.
	Reason string
	// What the engine knows (package docker's exitcause.go): OOMKilled,
	// the kernel killed the container at its memory limit (and nobody
	// asked the engine to kill it); Killed, someone asked the engine to
	// signal it (docker kill, stop, rm -f); Removed, the container was
	// already gone when asked.
	OOMKilled bool
	Killed    bool
	Removed   bool
	// EngineLost is set by the caller, not the engine: the engine was
	// unavailable while the container stopped (it crashed or restarted).
	EngineLost bool
}

// Container describes one owned container found on the engine.
type Container struct {
	ID        string
	Name      string
	Labels    map[string]string
	Running   bool
	ExitCode  int
	CreatedAt time.Time
}

// Runtime is the engine seen by the sandbox package.
type Runtime interface {
	// Ping reports ErrEngineUnavailable (wrapped, naming the address) when the engine does not answer.
	Ping(ctx context.Context) error
	// Address is the engine address, for error messages.
	Address() string
	// EnsureImage makes the image present, pulling when the policy allows. ErrImageUnavailable when it
	// may not pull; ErrImageRefused (an *ImageRefusedError, images.go) for an image the runtime will
	// not run, a registry or size it refuses, or a pull that failed (package docker's
	// image_policy.go and registry.go): the refusal's message is for clients and carries nothing
	// a registry or the engine said.
	EnsureImage(ctx context.Context, ref string) error
	// Start creates and starts a locked-down container and returns its id; the image's metadata is
	// neutralised, and a refused image is ErrImageRefused (package docker's image_policy.go).
	Start(ctx context.Context, spec Spec) (string, error)
	// Prepare readies a started container for its first command, so that
	// command costs what a later one does (warm containers are prepared
	// while they wait in the pool). A container with nothing to prepare
	// returns nil.
	Prepare(ctx context.Context, id string) error
	// Wait blocks until the container's main process exits.
	Wait(ctx context.Context, id string) Exit
	// Exec runs a process as the sandbox user.
	Exec(ctx context.Context, id string, req ExecRequest) (ExecResult, error)
	// WriteFile writes content to an absolute path as the sandbox user,
	// creating parents; the file is replaced whole or not at all. A refusal
	// is one of the file errors (files.go). The content moves at pace's
	// pace (nil: at once).
	WriteFile(ctx context.Context, id, path, content string, pace Pacer) error
	// ReadFile reads a file as the sandbox user, at pace's pace; past
	// limit bytes it is ErrFileTooLarge. A refusal is one of the file
	// errors (files.go).
	ReadFile(ctx context.Context, id, path string, limit int, pace Pacer) ([]byte, error)
	// Logs returns the main process's stdout and stderr interleaved as
	// they came, at most limit bytes (the tail), read from the engine at
	// pace's pace (nil: at once): the engine reads its whole log to find
	// the tail, however little of it is kept.
	Logs(ctx context.Context, id string, limit int, pace Pacer) ([]byte, error)
	// Remove stops and removes the container; ErrNotFound counts as done and returns nil.
	Remove(ctx context.Context, id string) error
	// List returns the containers owned by this runtime's instance.
	List(ctx context.Context) ([]Container, error)
	// Close releases the engine client.
	Close() error
}

// CPUWeigher is implemented by a runtime that can weigh its running
// containers' CPU against each other. A weight is a share, not a limit:
// when the host's CPUs are contended, the kernel gives each busy
// container CPU time in proportion to its weight, each within its own
// CPU limit; an uncontended host gives every container what it asks.
// DefaultCPUWeight is the kernel's weight for a container nobody
// weighed (and for each host process); MinCPUWeight is the least.
type CPUWeigher interface {
	// SetCPUWeight sets a running container's weight, at once.
	// ErrNotFound or ErrNotRunning when it has no processes to weigh;
	// ErrCannotWeigh when no container of this engine can be weighed.
	SetCPUWeight(ctx context.Context, id string, weight int) error
	// SetTotalCPUWeight sets what all of the runtime's containers weigh
	// together against the host's own processes, each of which weighs
	// DefaultCPUWeight: at once, or for containers started later when
	// none runs. ErrCannotWeigh when their total cannot be weighed here
	// (each container's weight still can).
	SetTotalCPUWeight(ctx context.Context, weight int) error
	// SetCPULimit sets a running container's CPU limit (in 1e-9 CPUs, the
	// unit of Spec.NanoCPUs), at once: what it may use however idle the
	// host is. The same errors as SetCPUWeight.
	SetCPULimit(ctx context.Context, id string, nano int64) error
}

// The bounds of a CPU weight (cgroup v1's cpu.shares; v2's cpu.weight is
// mapped from them the way the engine maps its CPU shares).
const (
	DefaultCPUWeight = 1024
	MinCPUWeight     = 2
	MaxCPUWeight     = 262144
)

// Immediate is implemented by a runtime that runs nothing (the test mode's,
// package testmode) when Immediate reports true: Start returns with the
// container up and a run-mode program already ended (Wait answers at
// once). The sandbox package starts such a sandbox within its create,
// which then answers running (in run mode: exited), and asks for no egress
// rules, since nothing in it could send a packet.
type Immediate interface {
	Immediate() bool
}
