// Command rarecloud-testbackend serves the RareCloud API v1 on this
// machine, every sandbox a Docker container under gVisor. Every flag can
// also be set through RARECLOUD_TESTBACKEND_<FLAG> (upper case, - as _).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/httpserver"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/operator"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "rarecloud-testbackend:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("rarecloud-testbackend", flag.ContinueOnError)
	var cfg testbackend.Config
	var logLevel string
	var reap bool
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "address to serve the API on (under /v1)")
	fs.StringVar(&cfg.DataDir, "data", operator.DefaultDataDir(), "directory for records; they survive a restart. Created 0700 if missing; else it must be this user's, writable by no one else, and not a symbolic link. Default under $XDG_CACHE_HOME or ~/.cache; without either, /var/lib/rarecloud/testbackend for root, else none (pass --data)")
	fs.StringVar(&cfg.TokensFile, "tokens", "", `JSON file {"tokens":[{"token","account","scopes"}]}, each token listed once, readable by this user alone (chmod 600); without it a development token is created in DATA/dev-token`)
	fs.BoolVar(&cfg.AllowSharedTokensFile, "allow-shared-tokens-file", false, "accept a --tokens file that its group or others may read or write (refused without it)")
	fs.StringVar(&cfg.Mode, "mode", "real", "real (containers under gVisor) or test (no containers, every answer says mocked)")
	fs.StringVar(&cfg.DockerHost, "docker-host", "", "Docker engine address (default $DOCKER_HOST, else the engine make setup started)")
	fs.StringVar(&cfg.Runtime, "runtime", "runsc", "OCI runtime for sandboxes")
	fs.BoolVar(&cfg.AgentAttachOnly, "agent-attach-only", false, "talk to sandbox agents through the engine's attach stream only; by default each agent also gets a Unix socket of its own, which skips the engine's copies (the runtime make setup installs lets gVisor connect to it)")
	fs.StringVar(&cfg.Pull, "pull", "missing", "image pull policy: missing or never")
	fs.Var(registryList{&cfg.AllowRegistries}, "allow-registry", "registry (host[:port], exactly as image references name it) to pull custom images from whatever its address (that host:port only, not a host it redirects to); repeatable or comma-separated, also RARECLOUD_TESTBACKEND_ALLOW_REGISTRIES. Any other registry must resolve to public addresses only (testbackend/IMAGES.md)")
	fs.DurationVar(&cfg.PullTimeout, "pull-timeout", container.DefaultPullTimeout, "how long one image pull, and a create waiting for it, may take")
	fs.Int64Var(&cfg.MaxImageBytes, "max-image-bytes", docker.DefaultMaxImageBytes, "largest custom image, unpacked, in bytes; a larger one is removed and refused (422 IMAGE_TOO_LARGE)")
	fs.Int64Var(&cfg.MaxDownloadBytes, "max-image-download-bytes", docker.DefaultMaxDownloadBytes, "largest custom image, compressed as its manifest declares it, in bytes; refused before the pull")
	fs.Int64Var(&cfg.ImageBudgetBytes, "image-budget-bytes", docker.DefaultImageBudgetBytes, "what the images this backend pulled may take on the engine; past it unused ones are removed, least recently used first (template images never)")
	fs.IntVar(&cfg.MaxPulls, "max-pulls", docker.DefaultMaxPulls, "image pulls downloading at once, whoever asked; the rest wait in line, and one no create waits for any more never starts")
	fs.StringVar(&cfg.Network, "network", "", "Docker network for sandboxes (default the one make setup made; none for no network)")
	fs.DurationVar(&cfg.Retention, "retention", 24*time.Hour, "how long exited and terminated sandboxes stay readable")
	fs.IntVar(&cfg.MaxRetainedPerAccount, "max-retained-per-account", sandbox.DefaultMaxRetainedPerAccount, "exited and terminated sandboxes kept per account for --retention; past it the account's oldest (by when they ended) are forgotten early, record and logs, as if deleted")
	fs.IntVar(&cfg.MaxIdempotencyKeysPerAccount, "max-idempotency-keys-per-account", sandbox.DefaultMaxIdempotencyKeysPerAccount, "idempotency keys kept per account for their 24h; past it the account's oldest are forgotten first, and a create that sends one again makes a new sandbox")
	fs.Int64Var(&cfg.MaxRetainedBytesPerAccount, "max-retained-bytes-per-account", sandbox.DefaultMaxRetainedBytesPerAccount, "bytes of ended sandboxes' records kept per account; past it the account's oldest are forgotten early, as past --max-retained-per-account")
	fs.Int64Var(&cfg.MaxIdempotencyBytesPerAccount, "max-idempotency-bytes-per-account", sandbox.DefaultMaxIdempotencyBytesPerAccount, "bytes of idempotency keys' kept answers per account; past it the account's oldest keys are forgotten first")
	fs.IntVar(&cfg.MaxRunningExecKeysPerAccount, "max-running-exec-keys-per-account", sandbox.DefaultMaxRunningExecKeysPerAccount, "commands with an Idempotency-Key one account may have running at once (they run on after their requests end); past it 429 with Retry-After, nothing run")
	fs.Int64Var(&cfg.MaxExecAnswerBytesPerAccount, "max-exec-answer-bytes-per-account", sandbox.DefaultMaxExecAnswerBytesPerAccount, "bytes of finished keyed commands' answers kept per account; past it the account's oldest keys are forgotten first, and a retry with one runs again")
	fs.IntVar(&cfg.PoolSize, "pool-size", 2, "warm containers kept ready per template (0 turns the pool off)")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", 64, "concurrent requests per account; past it a request queues while its line moves (--queue-wait, --queue-wait-max), then the API answers 429 with Retry-After")
	fs.DurationVar(&cfg.QueueWait, "queue-wait", 2*time.Second, "how long a request over --max-in-flight waits in line while none of its account's requests finishes, before the 429 (0s: refuse at once)")
	fs.DurationVar(&cfg.QueueWaitMax, "queue-wait-max", 30*time.Second, "the longest a request over --max-in-flight waits in line in all, however the line moves")
	fs.Float64Var(&cfg.VCPULimit, "vcpu-limit", 64, `vCPUs the live sandboxes of one account may use together; the tokens file's "accounts":[{"account","vcpuLimit"}] overrides it per account`)
	fs.Int64Var(&cfg.HostMemoryBytes, "host-memory", 0, "bytes of memory the host offers sandboxes before the reserve (0: the machine's MemTotal; -1: no host bound)")
	fs.Float64Var(&cfg.MemoryOvercommit, "memory-overcommit", sandbox.DefaultMemoryOvercommit, "how far the memory limits of all live sandboxes may add up past the host's memory less a 2 GiB reserve (1: the sandboxes can never take the host's memory)")
	fs.Float64Var(&cfg.HostShare, "host-share", sandbox.DefaultHostShare, "the part of that capacity one account may hold, and of the host's CPUs while other accounts have live sandboxes, less --start-duty of a CPU for each of its starts running or resting (0 to 1)")
	fs.Int64Var(&cfg.DiskReserve, "disk-reserve", sandbox.DefaultDiskReserve, "bytes of free space creates leave on the file system of --data: below it a create answers 503 HOST_CAPACITY_EXHAUSTED naming the disk (-1: no bound)")
	fs.IntVar(&cfg.StartSlots, "start-slots", sandbox.DefaultStartSlots, "container starts that run at once; the rest wait, in turns across accounts")
	fs.IntVar(&cfg.StartShare, "start-share", sandbox.DefaultStartShare(), "container starts one account runs at once while other accounts have live sandboxes (a start's engine and boot work is host CPU outside any sandbox's limit); an account alone uses every slot")
	fs.Float64Var(&cfg.StartDuty, "start-duty", sandbox.DefaultStartDuty, "the part of the time one account's container starts may hold its --start-share while other accounts have live sandboxes: after a start that took d it starts nothing more for d×(1−duty)/duty (0 < duty ≤ 1; 1: no rest); an account alone never rests")
	fs.IntVar(&cfg.TransferShare, "transfer-share", sandbox.DefaultTransferShare, "file reads and writes one account runs at once while other accounts have live sandboxes (every byte is host CPU outside any sandbox's limit); the rest wait in its line, at most 3s, then 429 with Retry-After; an account alone runs them all at once")
	fs.IntVar(&cfg.TransferRate, "transfer-rate", sandbox.DefaultTransferRate, "bytes a second one account's file reads and writes move together while other accounts have live sandboxes (read from the agent no faster, so the agent, and the engine when it carries them, copy them no faster); at least 2 MiB a second; an account alone moves them at full speed")
	fs.StringVar(&cfg.EgressControl, "egress-control", "auto", "egressMode DENY_ALL and ALLOW_LIST: on (start fails when the machine cannot enforce them), off (refused with 400 EGRESS_CONTROL_UNAVAILABLE) or auto (on when possible)")
	fs.DurationVar(&cfg.MinIdleTimeout, "min-idle-timeout", sandbox.DefaultMinIdleTimeout, "least idleTimeoutMs (smaller values are raised to it); a test knob: the product's minimum is 90s")
	fs.DurationVar(&cfg.BodyReadTimeout, "body-read-timeout", httpserver.DefaultBodyReadTimeout, "how long reading one request, headers and body, may take from its first byte; a body not in by then is answered 408 REQUEST_TIMEOUT and the connection closed. It ends once the body is in, so long polls and long commands are not cut")
	fs.DurationVar(&cfg.ConnIdleTimeout, "conn-idle-timeout", httpserver.DefaultConnIdleTimeout, "close a keep-alive connection that has sent no new request for this long")
	fs.IntVar(&cfg.MaxConnsPerAddr, "max-conns-per-addr", httpserver.DefaultMaxConnsPerAddr, "open connections from one client IP address; past it a new connection is closed as soon as it is accepted, the earlier ones untouched (-1: no bound)")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&reap, "reap", false, "remove the containers of backends that are gone for good (lease free, data directory deleted), then exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: rarecloud-testbackend [flags]\n\nEvery flag can also be set as RARECLOUD_TESTBACKEND_<FLAG>.\n\n")
		fs.PrintDefaults()
	}
	if err := envDefaults(fs); err != nil {
		return err
	}
	if v, ok := os.LookupEnv("RARECLOUD_TESTBACKEND_ALLOW_REGISTRIES"); ok {
		if err := fs.Set("allow-registry", v); err != nil {
			return fmt.Errorf("RARECLOUD_TESTBACKEND_ALLOW_REGISTRIES: %w", err)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if cfg.QueueWait == 0 {
		cfg.QueueWait = -1 // the flag's 0s means no wait; the Config's 0 means the default
	}
	if !(cfg.StartDuty > 0 && cfg.StartDuty <= 1) {
		return fmt.Errorf("start-duty: %v is not in (0, 1]: it is the part of the time one account's starts may hold their share", cfg.StartDuty)
	}
	if cfg.TransferRate < sandbox.MinTransferRate {
		return fmt.Errorf("transfer-rate: %d bytes a second is below the least, %d (2 MiB): the largest read would hold its sandbox's other answers past their grace", cfg.TransferRate, sandbox.MinTransferRate)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return fmt.Errorf("log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg.Logger = log

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if reap {
		return reapOrphans(ctx, cfg.DockerHost, log)
	}
	b, err := testbackend.New(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info("serving the RareCloud API", "url", b.URL(), "mode", cfg.Mode, "data", cfg.DataDir)
	if tok := b.DevToken(); tok != "" {
		path := filepath.Join(cfg.DataDir, testbackend.DevTokenFile)
		if b.DevTokenCreated() {
			// Printed once, when it is made; afterwards only where it is.
			fmt.Fprintf(os.Stderr, "created a development token (account dev, services:read and services:write), kept in %s:\n%s\n", path, tok)
		} else {
			log.Info("using the development token", "file", path)
		}
	}
	<-ctx.Done()
	log.Info("shutting down")
	return b.Close()
}

// envDefaults lets RARECLOUD_TESTBACKEND_<FLAG> set each flag; the command
// line still wins.
func envDefaults(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := "RARECLOUD_TESTBACKEND_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s: %w", name, serr)
			}
		}
	})
	return err
}

// reapOrphans is --reap: what a starting backend does first, alone.
func reapOrphans(ctx context.Context, host string, log *slog.Logger) error {
	d, err := docker.New(docker.Options{Host: host, Instance: "reaper", Agent: docker.AgentNone}) // it starts no sandbox
	if err != nil {
		return err
	}
	defer d.Close()
	n, err := instance.Reap(ctx, d, log)
	log.Info("reaped the containers of backends that are gone", "containers", n)
	return err
}

// registryList is --allow-registry: repeatable, each value comma-separated.
type registryList struct{ list *[]string }

func (r registryList) String() string {
	if r.list == nil {
		return ""
	}
	return strings.Join(*r.list, ",")
}

func (r registryList) Set(v string) error {
	for _, h := range strings.Split(v, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if strings.Contains(h, "/") || strings.Contains(h, "://") {
			return fmt.Errorf("registry %q: want host[:port], as image references name it", h)
		}
		*r.list = append(*r.list, strings.ToLower(h))
	}
	return nil
}
