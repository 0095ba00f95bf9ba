package docker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/hostnet"
)

// Name resolution inside sandboxes.
//
// On a user-defined network Docker always writes "nameserver 127.0.0.11"
// (its embedded resolver) into a container's /etc/resolv.conf, also with
// HostConfig.DNS set; under gVisor's own network stack 127.0.0.11 is the
// sandbox's own loopback, so nothing resolves. make setup therefore runs a
// DNS forwarder on the bridge gateway (network.json "dns"), and the runtime
// bind-mounts a resolv.conf of its own that names it, read-only, at
// /etc/resolv.conf (Docker then mounts none of its own).

// resolvConfTarget is where the generated file appears inside a sandbox.
const resolvConfTarget = "/etc/resolv.conf"

// Variables so that tests can point them elsewhere.
var (
	// networkFile is where make setup describes the sandbox network it
	// made, with the address of its DNS forwarder.
	networkFile = hostnet.File
	// resolvDirs are the host directories for the generated resolv.conf
	// files, the first usable one: in make setup's run directory (when it
	// exists and we are root), else a private one in the temporary
	// directory. Only the last path element is ever created.
	resolvDirs = []string{
		"/run/rarecloud/resolv",
		filepath.Join(os.TempDir(), fmt.Sprintf("rarecloud-resolv-%d", os.Getuid())),
	}
)

// readSetupNetwork reads networkFile; ok is false when there is none.
func readSetupNetwork() (n hostnet.Network, ok bool, err error) {
	n, ok, err = hostnet.Load(networkFile)
	if err != nil {
		return n, false, fmt.Errorf("runtime: %w", err)
	}
	return n, ok, nil
}

// sandboxDNS decides the name servers of sandboxes on network: the
// explicit ones when given, else, when network is the one make setup made,
// the forwarder networkFile names. None (nil) for the "none" network, and
// for other networks without explicit servers: Docker's default then.
func sandboxDNS(network string, explicit []string) ([]string, error) {
	if network == NetworkNone {
		return nil, nil
	}
	servers := explicit
	if len(servers) == 0 {
		n, ok, err := readSetupNetwork()
		if err != nil || !ok {
			return nil, err
		}
		if n.Network != network || n.DNS == "" {
			return nil, nil
		}
		servers = []string{n.DNS}
	}
	out := make([]string, 0, len(servers))
	for _, s := range servers {
		s = strings.TrimSpace(s)
		if net.ParseIP(s) == nil {
			return nil, fmt.Errorf("runtime: DNS server %q is not an IP address", s)
		}
		out = append(out, s)
	}
	return out, nil
}

// resolvConf is the file a sandbox sees as /etc/resolv.conf. ndots:0: a
// name with no dot is not tried against search domains (there are none).
func resolvConf(servers []string) []byte {
	var b bytes.Buffer
	b.WriteString("# RareCloud sandbox name servers (written by the backend).\n")
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	b.WriteString("options ndots:0\n")
	return b.Bytes()
}

// writeResolvConf makes sure a file with resolvConf(servers) exists on the
// host and returns its path. The name is derived from the content, so a
// file never changes once a sandbox mounts it, and backends sharing a
// directory write the same bytes to the same name.
func writeResolvConf(servers []string) (string, error) {
	content := resolvConf(servers)
	sum := sha256.Sum256(content)
	name := "resolv-" + hex.EncodeToString(sum[:8]) + ".conf"
	var errs []error
	for _, dir := range resolvDirs {
		path, err := writeResolvConfIn(dir, name, content)
		if err == nil {
			return path, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no directory for the sandboxes' resolv.conf: %w", errors.Join(errs...))
}

func writeResolvConfIn(dir, name string, content []byte) (string, error) {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", err
	}
	// Ours alone: a directory (no symlink) of our uid that nobody else may
	// write to, or someone else could choose what sandboxes resolve with.
	st, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !st.IsDir() || !ok || int(sys.Uid) != os.Getuid() || st.Mode().Perm()&0o022 != 0 {
		return "", fmt.Errorf("%s is not a directory of uid %d that only it can write to", dir, os.Getuid())
	}
	path := filepath.Join(dir, name)
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, content) {
		return path, nil
	}
	f, err := os.CreateTemp(dir, ".resolv-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	_, err = f.Write(content)
	if err == nil {
		err = f.Chmod(0o644) // the sandbox user reads it
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return path, nil
}

// useDNS gives a sandbox the runtime's name servers: as HostConfig.DNS (what
// docker inspect shows) and, with an engine on this machine (the mount's
// source is a host path), as a read-only /etc/resolv.conf.
func (d *Runtime) useDNS(hc *dockercontainer.HostConfig) error {
	if d.network == NetworkNone || len(d.dns) == 0 {
		return nil
	}
	hc.DNS = d.dns
	if !strings.HasPrefix(d.host, "unix://") {
		return nil
	}
	path, err := writeResolvConf(d.dns)
	if err != nil {
		return fmt.Errorf("runtime: resolv.conf for sandboxes: %w", err)
	}
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: path, Target: resolvConfTarget, ReadOnly: true})
	return nil
}
