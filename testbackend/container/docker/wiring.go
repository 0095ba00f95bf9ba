package docker

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/netwire"
)

// The Docker runtime's side of wiring sandboxes itself (package netwire): the
// container is created without a network and with a hosts file of its own,
// wired between create and start, and unwired when removed.

// ownNetFor is the wiring for sandboxes on network: the bridge setup made,
// when setup installed the wrapper into the engine it started, that engine
// is the one at host, and the backend is root (it makes namespaces); else
// nil.
func ownNetFor(network, host string) (*netwire.Wiring, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	n, ok, err := readSetupNetwork()
	if err != nil || !ok || n.Network != network || n.Engine != host {
		return nil, err
	}
	return netwire.FromNetwork(n)
}

// hostsTarget is where a wired sandbox sees its hosts file. The engine
// writes none for a container without a network, so the backend writes one
// like the engine's: the loopback names and the sandbox's own address with
// its hostname (programs look themselves up by name).
const hostsTarget = "/etc/hosts"

// hostsDir holds the sandboxes' hosts files, one per container (a file
// hosts-*, made before its container, and a symlink named by the container
// id that points at it, made once the id is known).
var hostsDir = "/run/rarecloud/hosts"

// hostsFile is the content of a sandbox's /etc/hosts.
func hostsFile(addr netip.Addr, hostname string) []byte {
	return []byte("# RareCloud sandbox hosts (written by the backend).\n" +
		"127.0.0.1\tlocalhost\n" +
		"::1\tlocalhost ip6-localhost ip6-loopback\n" +
		addr.String() + "\t" + hostname + "\n")
}

// useOwnNet has the engine create the container without a network (no
// endpoint, no prestart hook: wireNet wires it) and mounts a hosts file,
// empty until wireNet fills it in before the container starts. It returns
// the file's host path.
func (d *Runtime) useOwnNet(cfg *dockercontainer.Config, hc *dockercontainer.HostConfig) (string, error) {
	cfg.NetworkDisabled = true
	hc.NetworkMode = dockercontainer.NetworkMode(NetworkNone)
	if err := os.MkdirAll(hostsDir, 0o755); err != nil {
		return "", fmt.Errorf("runtime: hosts file for the sandbox: %w", err)
	}
	f, err := os.CreateTemp(hostsDir, "hosts-")
	if err != nil {
		return "", fmt.Errorf("runtime: hosts file for the sandbox: %w", err)
	}
	path := f.Name()
	err = f.Chmod(0o644)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("runtime: hosts file for the sandbox: %w", err)
	}
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: path, Target: hostsTarget, ReadOnly: true})
	return path, nil
}

// wireNet wires container id (see netwire.Wiring.Attach) and writes its hosts file.
func (d *Runtime) wireNet(id, want, hosts string) error {
	addr, err := d.own.Attach(id, want)
	if err != nil {
		return err
	}
	if err := os.Symlink(filepath.Base(hosts), filepath.Join(hostsDir, id)); err != nil {
		return fmt.Errorf("hosts file: %w", err)
	}
	hostname := id
	if len(hostname) > 12 {
		hostname = hostname[:12] // the engine's default hostname
	}
	return os.WriteFile(hosts, hostsFile(addr, hostname), 0o644)
}

// releaseNet undoes the wiring of a removed container (nothing when the
// engine networked it).
func (d *Runtime) releaseNet(id string) {
	if d.own == nil {
		return
	}
	d.own.Detach(id)
	removeHosts(id)
}

// removeHosts removes container id's hosts file and its link.
func removeHosts(id string) {
	if strings.ContainsAny(id, "/.") || id == "" {
		return
	}
	link := filepath.Join(hostsDir, id)
	if t, err := os.Readlink(link); err == nil && !strings.Contains(t, "/") {
		_ = os.Remove(filepath.Join(hostsDir, t))
	}
	_ = os.Remove(link)
}

// DefaultSweepEvery is how often a running backend sweeps the wiring of
// containers that are gone (KeepSwept).
const DefaultSweepEvery = 15 * time.Second

// KeepSwept runs SweepNetworks every interval until ctx ends. A sweep at
// start is not enough: a container whose removal the engine finishes after
// the backend that asked for it died (killed right after a DELETE) is
// still listed when the next backend starts, and its namespace and lease
// would stay until some later start.
func (d *Runtime) KeepSwept(ctx context.Context, every time.Duration, log *slog.Logger) {
	if d.own == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, every)
		n, err := d.SweepNetworks(sctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("sweeping the network wiring of containers that are gone", "err", err)
		case n > 0:
			log.Info("removed the network wiring of containers that are gone", "count", n)
		}
	}
}

// SweepNetworks removes the wiring left by containers that are gone (a
// backend that crashed between creating a sandbox and removing it, or a
// sandbox another backend removed): namespaces, leases, and hosts files no
// container mounts (older than a minute: a file is made just before its
// container). It reports how many it removed.
func (d *Runtime) SweepNetworks(ctx context.Context) (int, error) {
	if d.own == nil {
		return 0, nil
	}
	hostsEnts, _ := os.ReadDir(hostsDir)
	var live, mounted map[string]bool
	n, err := d.own.Sweep(func() (map[string]bool, error) {
		cs, err := d.cli.ContainerList(ctx, dockercontainer.ListOptions{All: true})
		if err != nil {
			return nil, d.engineErr("list containers", err)
		}
		live = make(map[string]bool, len(cs))
		mounted = map[string]bool{}
		for _, c := range cs {
			live[c.ID] = true
			for _, m := range c.Mounts {
				mounted[m.Source] = true
			}
		}
		return live, nil
	})
	if err != nil || live == nil {
		return n, err
	}
	for _, e := range hostsEnts {
		name := e.Name()
		p := filepath.Join(hostsDir, name)
		if !strings.HasPrefix(name, "hosts-") {
			if !live[name] { // the link of a container that is gone
				removeHosts(name)
				n++
			}
			continue
		}
		info, err := e.Info()
		if err != nil || mounted[p] || time.Since(info.ModTime()) < time.Minute {
			continue
		}
		if os.Remove(p) == nil {
			n++
		}
	}
	return n, nil
}
