package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/ocispec"
)

// One test per field of an image's metadata (image_policy.go): each builds
// the hostile image it needs on the engine under test (the legacy builder,
// FROM the base template, no RUN: nothing leaves the machine) and removes
// it when it ends.

// buildImage builds dockerfile (the whole context) for platform ("" is the
// engine's own) and returns its unique tag.
func buildImage(t *testing.T, d *Runtime, platform, dockerfile string) string {
	t.Helper()
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	if err := tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(dockerfile))}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(tw, dockerfile); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	tag := "rarecloud-test/hostile-" + randomID(t) + ":latest"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	resp, err := d.cli.ImageBuild(ctx, &ctxTar, build.ImageBuildOptions{
		Tags: []string{tag}, Dockerfile: "Dockerfile", Remove: true, ForceRemove: true,
		// No cache: a step of another test's build for another platform
		// (FROM scratch has no parent to tell them apart) would be reused.
		NoCache:  true,
		Platform: platform, Version: build.BuilderV1,
	})
	if err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	defer resp.Body.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := d.cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("cleanup: remove image %s: %v", tag, err)
		}
	})
	dec := json.NewDecoder(resp.Body)
	for {
		var msg jsonmessage.JSONMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("build %s: reading the output: %v", tag, err)
		}
		if msg.Error != nil {
			t.Fatalf("build %s: %s", tag, msg.Error.Message)
		}
	}
	if _, err := d.cli.ImageInspect(ctx, tag); err != nil {
		t.Fatalf("build %s: no image after the build: %v", tag, err)
	}
	return tag
}

// fromBase is a Dockerfile FROM the base template with lines after it.
func fromBase(lines ...string) string {
	return "FROM " + baseImage + "\n" + strings.Join(lines, "\n") + "\n"
}

func inspectContainer(t *testing.T, d *Runtime, id string) dockercontainer.InspectResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return info
}

// runOutput starts spec in run mode, waits for its program to end with 0
// and returns its output.
func runOutput(t *testing.T, d *Runtime, spec container.Spec) string {
	t.Helper()
	spec.RunMode = true
	id := start(t, d, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if ex := d.Wait(ctx, id); ex.Err != nil || ex.Code != 0 {
		logs, _ := d.Logs(ctx, id, 1<<16, nil)
		t.Fatalf("run %q: %+v; output %q", spec.Cmd, ex, logs)
	}
	logs, err := d.Logs(ctx, id, 1<<16, nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(logs)
}

// wantRefused checks that EnsureImage and Start both refuse ref under rule,
// naming the image, and that Start left no container behind.
func wantRefused(t *testing.T, d *Runtime, ref, rule string, inMsg ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	check := func(op string, err error) {
		t.Helper()
		var re *container.ImageRefusedError
		if !errors.Is(err, container.ErrImageRefused) || !errors.As(err, &re) || re.Rule != rule {
			t.Fatalf("%s %s: %v, want ErrImageRefused under rule %q", op, ref, err, rule)
		}
		t.Logf("%s: %s", op, re.Msg)
		for _, want := range append([]string{ref}, inMsg...) {
			if !strings.Contains(re.Msg, want) {
				t.Errorf("%s: message %q does not say %q", op, re.Msg, want)
			}
		}
	}
	check("EnsureImage", d.EnsureImage(ctx, ref))
	spec := testSpec(t)
	spec.Image = ref
	id, err := d.Start(ctx, spec)
	if id != "" {
		t.Cleanup(func() { _ = d.Remove(context.Background(), id) })
	}
	check("Start", err)
	if cs, err := d.List(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("a refused Start left containers: %+v, %v", cs, err)
	}
}

// VOLUME: each becomes a tmpfs owned by the sandbox user, inside the /tmp
// budget; the engine creates no volume.
func TestImageVolumeBecomesTmpfs(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	ref := buildImage(t, d, "", fromBase("VOLUME /data /tmp/cache/ /home/user"))
	spec := testSpec(t)
	spec.Image = ref
	spec.TmpBytes = 24 * mib
	id := start(t, d, spec)

	info := inspectContainer(t, d, id)
	for _, m := range info.Mounts {
		if m.Type == "volume" || m.Type == "bind" && !strings.HasPrefix(m.Destination, "/etc/") && m.Destination != agentTarget && m.Destination != ocispec.ChannelTarget {
			t.Errorf("the image's VOLUME became an engine mount: %+v", m)
		}
	}
	// Two volumes (/home/user is the home tmpfs already) share the /tmp
	// budget with /tmp: 8 MiB each.
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "for p in /data /tmp/cache /tmp; do stat -f -c '%T %b %S' $p; done; touch /data/ok && stat -c '%u %a' /data"}})
	wantExit(t, res, 0)
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if len(lines) != 4 {
		t.Fatalf("stat: %q", res.Stdout)
	}
	for i, p := range []string{"/data", "/tmp/cache", "/tmp"} {
		f := strings.Fields(lines[i])
		if len(f) != 3 || f[0] != "tmpfs" {
			t.Fatalf("%s is not a tmpfs: %q", p, lines[i])
		}
		blocks, _ := strconv.ParseInt(f[1], 10, 64)
		bsize, _ := strconv.ParseInt(f[2], 10, 64)
		if size := blocks * bsize; size <= 0 || size > spec.TmpBytes/3 {
			t.Errorf("%s is %d bytes, want at most %d (a third of the /tmp budget)", p, size, spec.TmpBytes/3)
		}
	}
	if lines[3] != "10001 755" {
		t.Errorf("/data owner and mode: %q, want 10001 755", lines[3])
	}
	res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "dd if=/dev/zero of=/data/big bs=1M count=16 && echo wrote-all"}, Timeout: 30 * time.Second})
	if res.ExitCode == nil || *res.ExitCode == 0 || strings.Contains(string(res.Stdout), "wrote-all") || !strings.Contains(string(res.Stderr), "No space left") {
		t.Fatalf("dd past the volume's size: exit %v stdout %q stderr %q", deref(res.ExitCode), res.Stdout, res.Stderr)
	}
}

// VOLUME over the system's directories, or too many: refused.
func TestImageVolumeRefused(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	var many []string
	for i := range maxImageVolumes + 1 {
		many = append(many, fmt.Sprintf("/v%d", i))
	}
	for name, tc := range map[string]struct{ line, want string }{
		"proc": {"VOLUME /proc/x", "/proc/x"},
		"root": {"VOLUME /", `"/"`},
		"many": {"VOLUME " + strings.Join(many, " "), strconv.Itoa(maxImageVolumes)},
	} {
		t.Run(name, func(t *testing.T) {
			wantRefused(t, d, buildImage(t, d, "", fromBase(tc.line)), container.RuleVolumes, tc.want)
		})
	}
}

// HEALTHCHECK: disabled, the engine never execs into the sandbox for it.
func TestImageHealthcheckDisabled(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	spec := testSpec(t)
	spec.Image = buildImage(t, d, "", fromBase("HEALTHCHECK --interval=1s CMD true"))
	id := start(t, d, spec)
	info := inspectContainer(t, d, id)
	if info.State.Health != nil {
		t.Errorf("the image's healthcheck runs: State.Health %+v", info.State.Health)
	}
	if hc := info.Config.Healthcheck; hc == nil || len(hc.Test) != 1 || hc.Test[0] != "NONE" {
		t.Errorf("Config.Healthcheck %+v, want NONE", hc)
	}
}

// LABEL: the image's io.rarecloud.* labels are blanked on the container, so
// List, Inspect and the agent see only what the backend wrote; other labels
// stay.
func TestImageLabelsCannotClaimOwnership(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{Agent: AgentNone})
	spec := testSpec(t)
	spec.Image = buildImage(t, d, "", fromBase(
		"LABEL io.rarecloud.pool=yes io.rarecloud.agent="+agent.Protocol+" io.rarecloud.sandbox=sbx-other",
		"LABEL io.rarecloud.instance=other io.rarecloud.managed=false io.rarecloud.future=x com.example.kept=1"))
	id := start(t, d, spec)
	ctx := context.Background()

	cs, err := d.List(ctx)
	if err != nil || len(cs) != 1 {
		t.Fatalf("List: %+v, %v", cs, err)
	}
	c, err := d.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, labels := range []map[string]string{cs[0].Labels, c.Labels} {
		for k, v := range labels {
			if !strings.HasPrefix(k, "io.rarecloud.") {
				continue
			}
			switch k {
			case container.LabelManaged, container.LabelInstance, container.LabelSandboxID:
			default:
				t.Errorf("label %s=%q reaches the backend; only its own labels should", k, v)
			}
		}
		if labels[container.LabelManaged] != "true" || labels[container.LabelInstance] != d.Instance() || labels[container.LabelSandboxID] != spec.Labels[container.LabelSandboxID] {
			t.Errorf("owner labels %v", labels)
		}
	}
	raw := inspectContainer(t, d, id).Config.Labels
	if raw[container.LabelPool] != "" || raw[LabelAgent] != "" || raw["io.rarecloud.future"] != "" || raw["com.example.kept"] != "1" {
		t.Errorf("container labels %v: want the image's io.rarecloud.* blanked, com.example.kept=1", raw)
	}
	// No agent runs: commands go through the engine, not to a forged agent.
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"echo", "ok"}})
	wantExit(t, res, 0)
}

// USER: always 10001:10001, for commands and for the image's own program.
func TestImageUserForced(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	spec := testSpec(t)
	spec.Image = buildImage(t, d, "", fromBase("USER root"))
	id := start(t, d, spec)
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "id -u; id -g; id -G"}})
	wantExit(t, res, 0)
	if string(res.Stdout) != "10001\n10001\n10001\n" {
		t.Errorf("exec as %q, want 10001", res.Stdout)
	}
	spec.Cmd = []string{"id", "-u"}
	if out := runOutput(t, d, spec); out != "10001\n" {
		t.Errorf("run mode as %q, want 10001", out)
	}
}

// EXPOSE: ignored, nothing is published.
func TestImageExposeIgnored(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	spec := testSpec(t)
	spec.Image = buildImage(t, d, "", fromBase("EXPOSE 80 8080/udp"))
	id := start(t, d, spec)
	info := inspectContainer(t, d, id)
	if info.HostConfig.PublishAllPorts || len(info.HostConfig.PortBindings) != 0 {
		t.Errorf("ports published: all %v, bindings %v", info.HostConfig.PublishAllPorts, info.HostConfig.PortBindings)
	}
	if info.NetworkSettings != nil {
		for port, bs := range info.NetworkSettings.Ports {
			if len(bs) != 0 {
				t.Errorf("port %s bound on the host: %+v", port, bs)
			}
		}
	}
}

// STOPSIGNAL: replaced by SIGTERM, which the sandbox's main process obeys:
// a stop ends it at once instead of at the stop timeout.
func TestImageStopSignalReplaced(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{Agent: AgentNone}) // the keepalive traps TERM only
	spec := testSpec(t)
	spec.Image = buildImage(t, d, "", fromBase("STOPSIGNAL SIGUSR1"))
	id := start(t, d, spec)
	if sig := inspectContainer(t, d, id).Config.StopSignal; sig != "SIGTERM" {
		t.Errorf("Config.StopSignal %q, want SIGTERM", sig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	timeout := 60 // a process the signal missed is killed after it: exit 137
	if err := d.cli.ContainerStop(ctx, id, dockercontainer.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if st := inspectContainer(t, d, id).State; st.Running || st.ExitCode != 0 {
		t.Errorf("after a stop: running %v, exit %d; want 0 (the keepalive's TERM trap)", st.Running, st.ExitCode)
	}
}

// ENTRYPOINT/CMD: a sandbox waiting for commands runs the backend's main
// process; run mode runs the image's program unless the request overrides it.
func TestImageEntrypointCmd(t *testing.T) {
	t.Parallel()
	execModes(t, func(t *testing.T, opts Options) {
		d := requireEngine(t, opts)
		spec := testSpec(t)
		spec.Image = buildImage(t, d, "", fromBase(`ENTRYPOINT ["/bin/sh", "-c", "touch /tmp/ran; echo image-entrypoint \"$0\""]`, `CMD ["image-cmd"]`))
		id := start(t, d, spec)
		res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "test ! -e /tmp/ran && echo backend-main"}})
		wantExit(t, res, 0)
		if got := inspectContainer(t, d, id).Config.Entrypoint; len(got) == 0 || got[0] != keepalive[0] && got[0] != agentTarget {
			t.Errorf("main process %q, want the backend's", got)
		}
		if opts.Agent != "" {
			return // run mode does not depend on the agent
		}
		if out := runOutput(t, d, spec); out != "image-entrypoint image-cmd\n" {
			t.Errorf("run mode, image's program: %q", out)
		}
		spec.Cmd = []string{"request-cmd"}
		if out := runOutput(t, d, spec); out != "image-entrypoint request-cmd\n" {
			t.Errorf("run mode, request's CMD: %q", out)
		}
		spec.Entrypoint, spec.Cmd = []string{"echo"}, []string{"request-only"}
		if out := runOutput(t, d, spec); out != "request-only\n" {
			t.Errorf("run mode, request's ENTRYPOINT: %q", out)
		}
	})
}

// WORKDIR: commands run in /home/user; run mode honours the image's.
func TestImageWorkdir(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	spec := testSpec(t)
	spec.Image = buildImage(t, d, "", fromBase("WORKDIR /app"))
	id := start(t, d, spec)
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"pwd"}})
	wantExit(t, res, 0)
	if string(res.Stdout) != SandboxHome+"\n" {
		t.Errorf("exec in %q, want %s", res.Stdout, SandboxHome)
	}
	spec.Cmd = []string{"pwd"}
	if out := runOutput(t, d, spec); out != "/app\n" {
		t.Errorf("run mode in %q, want the image's /app", out)
	}
}

// ENV: honoured; the request's variables win; HOME is the sandbox's home.
func TestImageEnv(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	spec := testSpec(t)
	spec.Image = buildImage(t, d, "", fromBase("ENV HOME=/root FOO=image BAR=image"))
	spec.Env = map[string]string{"FOO": "request"}
	id := start(t, d, spec)
	const show = `echo "$HOME|$FOO|$BAR"`
	want := SandboxHome + "|request|image\n"
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", show}})
	wantExit(t, res, 0)
	if string(res.Stdout) != want {
		t.Errorf("exec environment %q, want %q", res.Stdout, want)
	}
	spec.Cmd = []string{"sh", "-c", show}
	if out := runOutput(t, d, spec); out != want {
		t.Errorf("run mode environment %q, want %q", out, want)
	}
}

// SHELL: ignored (only builds use it): commands still run.
func TestImageShellIgnored(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	spec := testSpec(t)
	spec.Image = buildImage(t, d, "", fromBase(`SHELL ["/bin/false"]`))
	id := start(t, d, spec)
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "echo ok"}})
	wantExit(t, res, 0)
	if string(res.Stdout) != "ok\n" {
		t.Errorf("exec: %q", res.Stdout)
	}
	spec.Cmd = []string{"echo", "ok"}
	if out := runOutput(t, d, spec); out != "ok\n" {
		t.Errorf("run mode: %q", out)
	}
}

// Platform: an image for another architecture is refused before any
// container is made.
func TestImagePlatformRefused(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := d.cli.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	foreign := "arm64"
	if v.Arch == "arm64" {
		foreign = "amd64"
	}
	ref := buildImage(t, d, "linux/"+foreign, "FROM scratch\nCOPY Dockerfile /Dockerfile\n")
	if img, err := d.cli.ImageInspect(ctx, ref); err != nil || img.Architecture != foreign {
		t.Fatalf("the test image is for %q (%v), want %s", img.Architecture, err, foreign)
	}
	wantRefused(t, d, ref, container.RulePlatform, "linux/"+foreign, "linux/"+v.Arch)
}
