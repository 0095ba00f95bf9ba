package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// keepalive is the main process of a sandbox that waits for commands. It is a
// shell loop rather than `sleep infinity` so that PID 1 reaps orphans (under
// runc; gVisor reaps them itself) and exits at once on SIGTERM. It needs only
// sh and sleep in the image; when sleep is missing the loop ends instead of
// spinning.
var keepalive = []string{"/bin/sh", "-c", "trap 'exit 0' TERM INT HUP; while sleep 3600 & wait $!; do :; done"}

// Start creates and starts a locked-down container and returns its id. When
// the container was created but could not start, it returns the id together
// with the error (after trying to remove it), so callers can clean up with
// Remove either way.
func (d *Runtime) Start(ctx context.Context, spec container.Spec) (string, error) {
	if spec.Image == "" {
		return "", errors.New("runtime: Spec.Image is empty")
	}
	img, err := d.inspectImage(ctx, spec.Image)
	if errors.Is(err, container.ErrImageUnavailable) && d.pull != PullNever {
		// Gone since the create ensured it (removed to keep the image
		// budget, or by hand): pulled again, under the same rules.
		if err = d.EnsureImage(ctx, spec.Image); err == nil {
			img, err = d.inspectImage(ctx, spec.Image)
		}
	}
	if err != nil {
		return "", err
	}
	if err := d.checkImage(ctx, spec.Image, img); err != nil {
		return "", err
	}
	spec.NanoCPUs = cpuLimit(spec.NanoCPUs, d.EngineCPUs(ctx))
	cfg := d.containerConfig(spec)
	hc := d.hostConfig(spec)
	hc.CgroupParent = d.cgroupParent(ctx)
	agentMain := false
	switch {
	case d.agentPath == "":
	case spec.RunMode:
		d.mountAgent(hc)
	default:
		d.useAgent(cfg, hc)
		agentMain = true
	}
	if err := d.useDNS(hc); err != nil {
		return "", err
	}
	hosts := ""
	if d.own != nil {
		if hosts, err = d.useOwnNet(cfg, hc); err != nil {
			return "", err
		}
	}
	var ch *agentChannel // made last of all that can fail before the create
	if agentMain {
		ch = d.openChannel(cfg, hc)
	}
	neutralise(cfg, hc, img, spec) // last: it sees every mount of the backend's

	created, err := d.cli.ContainerCreate(ctx, cfg, hc, d.endpointFor(spec), nil, spec.Name)
	if err != nil {
		if ch != nil {
			ch.close()
		}
		if hosts != "" {
			_ = os.Remove(hosts)
		}
		switch {
		case isEngineDown(err):
			return "", d.engineErr("create container", err)
		case cerrdefs.IsNotFound(err):
			return "", fmt.Errorf("%w: %s: %v", container.ErrImageUnavailable, spec.Image, err)
		default:
			return "", fmt.Errorf("runtime: create container from %s: %w", spec.Image, err)
		}
	}
	d.startedFrom(spec.Image) // a container uses it now: no hold needed
	d.keepChannel(created.ID, ch)
	if d.own != nil {
		if err := d.wireNet(created.ID, spec.IPv4, hosts); err != nil {
			rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = d.Remove(rmCtx, created.ID)
			_ = os.Remove(hosts) // also when wiring failed before it was recorded
			return created.ID, fmt.Errorf("runtime: network for the container from %s: %w", spec.Image, err)
		}
	}
	if err := d.cli.ContainerStart(ctx, created.ID, dockercontainer.StartOptions{}); err != nil {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = d.Remove(rmCtx, created.ID)
		if isEngineDown(err) {
			return created.ID, d.engineErr("start container", err)
		}
		err = fmt.Errorf("runtime: start container from %s with runtime %s: %w", spec.Image, d.runtime, err)
		if spec.RunMode && notInImage(err.Error()) {
			return created.ID, &container.StartRefusedError{Msg: missingProgram(spec), Err: err}
		}
		return created.ID, err
	}
	return created.ID, nil
}

// missingProgram says which program a run-mode sandbox lacks.
func missingProgram(spec container.Spec) string {
	argv := spec.Entrypoint
	if len(argv) == 0 {
		argv = spec.Cmd
	}
	if len(argv) == 0 {
		return fmt.Sprintf("the program of image %s is not in it", spec.Image)
	}
	return fmt.Sprintf("its program %q is not in image %s (give a path that exists there, or a name on its PATH)", argv[0], spec.Image)
}

// containerConfig is the container's own configuration: image, user,
// labels (owner and instance) and the main process (the image's for run
// mode, keepalive otherwise).
func (d *Runtime) containerConfig(spec container.Spec) *dockercontainer.Config {
	labels := make(map[string]string, len(spec.Labels)+2)
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[container.LabelManaged] = "true"
	labels[container.LabelInstance] = d.instance

	cfg := &dockercontainer.Config{
		Image:      spec.Image,
		User:       SandboxUser,
		WorkingDir: SandboxHome,
		Env:        envList(spec.Env),
		Labels:     labels,
	}
	if spec.RunMode {
		if len(spec.Entrypoint) > 0 {
			cfg.Entrypoint = spec.Entrypoint
		}
		if len(spec.Cmd) > 0 {
			cfg.Cmd = spec.Cmd
		}
	} else {
		// Our own main process, whatever the image's entrypoint is. A
		// non-nil empty Cmd keeps the image's CMD from being appended.
		cfg.Entrypoint = keepalive
		cfg.Cmd = []string{}
	}
	return cfg
}

// hostConfig is the locked-down host side of a sandbox: gVisor, read-only
// root with tmpfs home and /tmp, no capabilities, the sandbox network, and
// the template's memory, CPU and process limits.
func (d *Runtime) hostConfig(spec container.Spec) *dockercontainer.HostConfig {
	home := "uid=10001,gid=10001,mode=0700"
	if spec.HomeBytes > 0 {
		home = fmt.Sprintf("size=%d,%s", spec.HomeBytes, home)
	}
	tmp := "mode=1777"
	if spec.TmpBytes > 0 {
		tmp = fmt.Sprintf("size=%d,%s", spec.TmpBytes, tmp)
	}
	hc := &dockercontainer.HostConfig{
		Runtime:        d.runtime,
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{SandboxHome: home, "/tmp": tmp},
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		NetworkMode:    dockercontainer.NetworkMode(d.network),
		IpcMode:        dockercontainer.IPCModePrivate,
		AutoRemove:     false,
		RestartPolicy:  dockercontainer.RestartPolicy{Name: dockercontainer.RestartPolicyDisabled},
		Resources: dockercontainer.Resources{
			Memory: spec.MemoryBytes,
		},
	}
	if spec.NanoCPUs > 0 {
		hc.CPUPeriod, hc.CPUQuota = cpuQuota(spec.NanoCPUs)
	}
	if spec.CPUWeight > 0 {
		hc.CPUShares = int64(min(max(spec.CPUWeight, container.MinCPUWeight), container.MaxCPUWeight))
	}
	if spec.MemoryBytes > 0 {
		hc.MemorySwap = spec.MemoryBytes // no swap on top
	}
	if spec.MaxProcs > 0 {
		hc.Ulimits = []*dockercontainer.Ulimit{{Name: "nproc", Soft: spec.MaxProcs, Hard: spec.MaxProcs}}
		// A cgroup pids limit well above nproc: it counts the sandbox's own
		// host threads too, and small values (<= 256) break runsc.
		pids := spec.MaxProcs * 4
		if pids < 2048 {
			pids = 2048
		}
		hc.PidsLimit = &pids
	}
	return hc
}

// Wait blocks until the container's main process has exited (at once when
// it already has) or ctx ends.
func (d *Runtime) Wait(ctx context.Context, id string) container.Exit {
	respC, errC := d.cli.ContainerWait(ctx, id, dockercontainer.WaitConditionNotRunning)
	select {
	case resp := <-respC:
		if resp.Error != nil && resp.Error.Message != "" {
			return container.Exit{Code: int(resp.StatusCode), Err: fmt.Errorf("runtime: waiting for %s: %s", id, resp.Error.Message)}
		}
		return d.exitOf(id, int(resp.StatusCode))
	case err := <-errC:
		return container.Exit{Code: -1, Err: d.containerErr("wait for", id, err)}
	}
}

// Remove kills and removes the container with its anonymous volumes. A
// container that is gone counts as removed; when another removal is
// already under way, Remove returns once it has finished, so that a new
// container can take the name as soon as Remove returns.
func (d *Runtime) Remove(ctx context.Context, id string) error {
	err := d.cli.ContainerRemove(ctx, id, dockercontainer.RemoveOptions{Force: true, RemoveVolumes: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		d.removed(id)
		return nil
	}
	if strings.Contains(err.Error(), "already in progress") {
		if err := d.waitRemoved(ctx, id); err != nil {
			return err
		}
		d.removed(id)
		return nil
	}
	return d.containerErr("remove", id, err)
}

// removed forgets what the runtime kept of a container that is gone: its
// network wiring, its CPU weight file, its agent channel and what the
// agent's code kept of it (forgetAgent).
func (d *Runtime) removed(id string) {
	d.releaseNet(id)
	d.dropChannel(id)
	d.forgetAgent(id)
	d.forgetCPUWeight(id)
	d.removeLeftCgroups(id)
}

// waitRemoved waits until a removal under way has finished (the engine
// answers a failed removal too) or ctx ends.
func (d *Runtime) waitRemoved(ctx context.Context, id string) error {
	respC, errC := d.cli.ContainerWait(ctx, id, dockercontainer.WaitConditionRemoved)
	select {
	case resp := <-respC:
		if resp.Error != nil && resp.Error.Message != "" {
			return fmt.Errorf("runtime: remove container %s: %s", id, resp.Error.Message)
		}
		return nil
	case err := <-errC:
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		return d.containerErr("wait for the removal of", id, err)
	}
}

// List returns every container (any state) labelled with this instance.
func (d *Runtime) List(ctx context.Context) ([]container.Container, error) {
	cs, err := d.cli.ContainerList(ctx, dockercontainer.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", container.LabelInstance+"="+d.instance)),
	})
	if err != nil {
		return nil, d.engineErr("list containers", err)
	}
	out := make([]container.Container, 0, len(cs))
	for _, c := range cs {
		if c.Labels[container.LabelInstance] != d.instance { // belt and braces
			continue
		}
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, container.Container{
			ID:        c.ID,
			Name:      name,
			Labels:    ownLabels(c.Labels),
			Running:   c.State == dockercontainer.StateRunning,
			ExitCode:  exitCodeFromStatus(c.Status),
			CreatedAt: time.Unix(c.Created, 0),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// Inspect describes one container of this instance; ErrNotFound when it does
// not exist or belongs to another instance.
func (d *Runtime) Inspect(ctx context.Context, id string) (container.Container, error) {
	c, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return container.Container{}, d.containerErr("inspect", id, err)
	}
	if c.Config == nil || c.Config.Labels[container.LabelInstance] != d.instance {
		return container.Container{}, fmt.Errorf("%w: %s (not owned by instance %s)", container.ErrNotFound, id, d.instance)
	}
	out := container.Container{ID: c.ID, Name: strings.TrimPrefix(c.Name, "/"), Labels: ownLabels(c.Config.Labels)}
	if c.State != nil {
		out.Running = c.State.Running
		out.ExitCode = c.State.ExitCode
	}
	if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
		out.CreatedAt = t
	}
	return out, nil
}

func envList(env map[string]string) []string {
	if len(env) == 0 {
		return nil
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// exitCodeFromStatus reads the code from a list status like "Exited (3) 2
// seconds ago"; 0 when there is none.
func exitCodeFromStatus(status string) int {
	i := strings.Index(status, "Exited (")
	if i < 0 {
		return 0
	}
	rest := status[i+len("Exited ("):]
	j := strings.IndexByte(rest, ')')
	if j < 0 {
		return 0
	}
	n, err := strconv.Atoi(rest[:j])
	if err != nil {
		return 0
	}
	return n
}
