package docker

// An image is untrusted input: a customer names it, and its metadata would
// otherwise reach the engine as it is. Start inspects the image it is about
// to run, creates the container from that image's id (so a tag moved in
// between changes nothing) and decides each field of the image's
// configuration as follows (IMAGES.md says the same for users):
//
//	Field        Decision   What the sandbox gets, and why
//	-----------  ---------  -----------------------------------------------
//	VOLUME       replaced   Each path becomes a tmpfs owned by uid 10001
//	                        (mode 0755), never an engine volume or a host
//	                        mount: the volumes and /tmp share the /tmp
//	                        budget (Spec.TmpBytes) in equal parts, so what a
//	                        sandbox can write stays home + /tmp, inside its
//	                        memory limit. A volume starts empty (the image's
//	                        files under it are hidden). Paths that already
//	                        are a mount (/home/user, /tmp) stay as they are.
//	             refused    "/" or a path in /proc, /sys or /dev, or more
//	                        than maxImageVolumes volumes: 422
//	                        IMAGE_NOT_ALLOWED.
//	HEALTHCHECK  replaced   Disabled (NONE): the engine would exec into the
//	                        sandbox on host CPU no quota counts.
//	LABEL        replaced   The engine copies image labels onto the
//	                        container and its create API cannot drop one,
//	                        only override it: every io.rarecloud.* label of
//	                        the image that the backend does not write itself
//	                        is written empty, and List and Inspect pass on
//	                        no empty io.rarecloud.* label. So every backend
//	                        label reconcile, the reaper or the agent reads
//	                        is one the backend wrote (an image's
//	                        io.rarecloud.pool skipped reconcile's "no live
//	                        record" judgement; its io.rarecloud.agent had
//	                        commands sent to a forged agent, which hung).
//	                        Other labels stay (the backend reads none).
//	USER         replaced   Always 10001:10001 (SandboxUser), group included,
//	                        so no supplementary groups come from the image.
//	EXPOSE       ignored    Nothing is published (no port bindings, no
//	                        publish-all); the ports stay metadata.
//	STOPSIGNAL   replaced   SIGTERM, which the agent and the keepalive obey
//	                        at once; the backend itself removes with SIGKILL.
//	                        The image's signal would decide how an engine
//	                        stop (docker stop, an engine restart) ends the
//	                        main process: one it ignores waits the stop
//	                        timeout, SIGUSR1 killed the keepalive (138).
//	ENTRYPOINT,  replaced   A sandbox that waits for commands runs the
//	CMD                     backend's main process (the agent or the
//	                        keepalive), never the image's.
//	             honoured   Run mode runs the image's program; the request's
//	                        entrypoint and cmd override it (as the engine
//	                        does: a cmd alone keeps the image's entrypoint).
//	WORKDIR      replaced   Commands run in /home/user.
//	             honoured   Run mode starts the image's program in the
//	                        image's WORKDIR (programs name files relative to
//	                        it); /home/user when the image has none.
//	ENV          honoured   The image's variables reach the main process and
//	                        every command; the request's override them. HOME
//	                        is /home/user unless the request sets it: the
//	                        home tmpfs is where a sandbox can write, and a
//	                        user with no passwd entry would get HOME=/.
//	SHELL        ignored    Only builds use it; commands are argv, and no
//	                        healthcheck runs.
//	platform     refused    An image whose OS or architecture is not the
//	                        engine's (arm64 on amd64) is refused before any
//	                        container exists: 422 IMAGE_PLATFORM_MISMATCH.
//	                        The engine creates one with a mere warning; its
//	                        programs cannot run here.
//
// EnsureImage applies the refusals too, so a create answers 422 at once
// instead of a sandbox that fails to start.

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// maxImageVolumes bounds an image's VOLUME paths: each is a mount the
// runtime sets up, and each takes a share of the /tmp budget.
const maxImageVolumes = 16

// labelNamespace is the prefix of the backend's own labels.
const labelNamespace = "io.rarecloud."

// systemDirs are where a tmpfs would replace what the runtime mounts.
var systemDirs = []string{"/proc", "/sys", "/dev"}

// inspectImage describes the image ref names now: ErrImageUnavailable when
// it is not there.
func (d *Runtime) inspectImage(ctx context.Context, ref string) (image.InspectResponse, error) {
	img, err := d.cli.ImageInspect(ctx, ref)
	switch {
	case err == nil:
		return img, nil
	case isEngineDown(err):
		return img, d.engineErr("inspect image "+ref, err)
	case cerrdefs.IsNotFound(err):
		return img, fmt.Errorf("%w: %s is not present on %s", container.ErrImageUnavailable, ref, d.host)
	default:
		return img, d.engineErr("inspect image "+ref, err)
	}
}

// checkImage refuses an image the backend will not run (the table above).
func (d *Runtime) checkImage(ctx context.Context, ref string, img image.InspectResponse) error {
	osys, arch, err := d.enginePlatform(ctx)
	if err != nil {
		return err
	}
	// An image that does not say (old or hand-made configurations) is
	// not known to be another platform's.
	iosys, iarch := img.Os, normalArch(img.Architecture)
	if iosys == "" {
		iosys = osys
	}
	if iarch == "" {
		iarch = arch
	}
	if iosys != osys || iarch != arch {
		want := osys + "/" + arch
		return &container.ImageRefusedError{Image: ref, Rule: container.RulePlatform, Msg: fmt.Sprintf(
			"use an image built for %s: image %s is for %s/%s, and sandboxes run on %s", want, ref, iosys, iarch, want)}
	}
	vols := imageVolumes(img)
	if len(vols) > maxImageVolumes {
		return &container.ImageRefusedError{Image: ref, Rule: container.RuleVolumes, Msg: fmt.Sprintf(
			"declare at most %d volumes: image %s declares %d, and each becomes a tmpfs sharing /tmp's size", maxImageVolumes, ref, len(vols))}
	}
	for _, v := range vols {
		if v == "/" || underAny(v, systemDirs) {
			return &container.ImageRefusedError{Image: ref, Rule: container.RuleVolumes, Msg: fmt.Sprintf(
				"remove VOLUME %q from image %s: a volume at /, or in /proc, /sys or /dev, would hide what the sandbox runtime mounts there", v, ref)}
		}
	}
	return nil
}

// neutralise applies the replacements to a container about to be created
// from img, once every mount of the backend's own is in hc.
func neutralise(cfg *dockercontainer.Config, hc *dockercontainer.HostConfig, img image.InspectResponse, spec container.Spec) {
	cfg.Image = img.ID
	cfg.Healthcheck = &dockercontainer.HealthConfig{Test: []string{"NONE"}}
	cfg.StopSignal = "SIGTERM"
	hc.PublishAllPorts = false
	hc.PortBindings = nil

	var labels map[string]string
	workdir := ""
	if img.Config != nil {
		labels, workdir = img.Config.Labels, img.Config.WorkingDir
	}
	for k := range labels {
		if _, ours := cfg.Labels[k]; strings.HasPrefix(k, labelNamespace) && !ours {
			cfg.Labels[k] = ""
		}
	}
	if spec.RunMode && workdir != "" {
		cfg.WorkingDir = workdir
	}
	if _, set := spec.Env["HOME"]; !set {
		cfg.Env = append(cfg.Env, "HOME="+SandboxHome)
	}
	volumeTmpfs(hc, imageVolumes(img), spec.TmpBytes)
}

// volumeTmpfs mounts a tmpfs on every volume path that is not a mount
// already, the volumes and /tmp sharing tmpBytes. The engine makes a
// volume only for a path with no mount (it cleans the path first).
func volumeTmpfs(hc *dockercontainer.HostConfig, vols []string, tmpBytes int64) {
	taken := map[string]bool{}
	for p := range hc.Tmpfs {
		taken[path.Clean(p)] = true
	}
	for _, m := range hc.Mounts {
		taken[path.Clean(m.Target)] = true
	}
	var add []string
	for _, v := range vols {
		if !taken[v] {
			add = append(add, v)
		}
	}
	if len(add) == 0 {
		return
	}
	opts := "uid=10001,gid=10001,mode=0755"
	if tmpBytes > 0 {
		share := tmpBytes / int64(len(add)+1)
		opts = fmt.Sprintf("size=%d,%s", share, opts)
		if tmp, ok := hc.Tmpfs["/tmp"]; ok {
			hc.Tmpfs["/tmp"] = resize(tmp, share)
		}
	}
	for _, v := range add {
		hc.Tmpfs[v] = opts
	}
}

// resize sets the size= option of tmpfs options.
func resize(opts string, size int64) string {
	parts := []string{fmt.Sprintf("size=%d", size)}
	for _, o := range strings.Split(opts, ",") {
		if o != "" && !strings.HasPrefix(o, "size=") {
			parts = append(parts, o)
		}
	}
	return strings.Join(parts, ",")
}

// imageVolumes are the image's VOLUME paths, cleaned and sorted.
func imageVolumes(img image.InspectResponse) []string {
	if img.Config == nil {
		return nil
	}
	seen := map[string]bool{}
	for v := range img.Config.Volumes {
		seen[path.Clean("/"+v)] = true
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// ownLabels drops the empty io.rarecloud.* labels: the image's, blanked
// by neutralise. What is left of the namespace the backend wrote.
func ownLabels(labels map[string]string) map[string]string {
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		if v == "" && strings.HasPrefix(k, labelNamespace) {
			continue
		}
		out[k] = v
	}
	return out
}

// enginePlatform is the engine's OS and architecture, asked once it
// answers (the lock is not held across the call: two first calls both ask).
func (d *Runtime) enginePlatform(ctx context.Context) (string, string, error) {
	d.platformMu.Lock()
	osys, arch := d.platformOS, d.platformArch
	d.platformMu.Unlock()
	if osys != "" {
		return osys, arch, nil
	}
	v, err := d.cli.ServerVersion(ctx)
	if err != nil {
		return "", "", d.engineErr("ask the engine's platform", err)
	}
	osys, arch = v.Os, normalArch(v.Arch)
	d.platformMu.Lock()
	d.platformOS, d.platformArch = osys, arch
	d.platformMu.Unlock()
	return osys, arch, nil
}

// normalArch spells an architecture as Go and OCI images do.
func normalArch(a string) string {
	switch a {
	case "x86_64", "x86-64":
		return "amd64"
	case "aarch64":
		return "arm64"
	}
	return a
}
