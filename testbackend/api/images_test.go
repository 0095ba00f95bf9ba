package api_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// buildImage builds dockerfile (the whole context) for platform on the
// shared backend's engine with the legacy builder, and removes the image
// when the test ends.
func buildImage(t *testing.T, platform, dockerfile string) string {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.WithHost(shared.Runtime().Address()), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
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
	tag := "rarecloud-test/api-hostile-" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-") + ":" + time.Now().Format("150405.000000")
	tag = strings.ReplaceAll(tag, ".", "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// No cache: a step of another test's build for another platform (FROM
	// scratch has no parent to tell them apart) would be reused.
	resp, err := cli.ImageBuild(ctx, &ctxTar, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true, NoCache: true, Platform: platform, Version: build.BuilderV1})
	if err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	defer resp.Body.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
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
			t.Fatalf("build %s: %v", tag, err)
		}
		if msg.Error != nil {
			t.Fatalf("build %s: %s", tag, msg.Error.Message)
		}
	}
	return tag
}

// A create with an image the backend refuses answers 422 at once, naming
// the image and the rule and nothing the engine said, and leaves no sandbox.
func TestCreateRefusesHostileImage(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.WithHost(shared.Runtime().Address()), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	foreign := "arm64"
	if v.Arch == "arm64" {
		foreign = "amd64"
	}
	for _, tc := range []struct {
		name, platform, dockerfile, code, says string
	}{
		{"platform", "linux/" + foreign, "FROM scratch\nCOPY Dockerfile /Dockerfile\n", "IMAGE_PLATFORM_MISMATCH", "linux/" + foreign},
		{"volume", "", "FROM rarecloud/sandbox-base:latest\nVOLUME /proc/x\n", "IMAGE_NOT_ALLOWED", "/proc/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := buildImage(t, tc.platform, tc.dockerfile)
			cc := *c.Client
			cc.T = t
			msg := apitest.ExpectErr(t, cc.Do("POST", "/sandboxes", tokA, map[string]any{"image": ref, "labels": map[string]string{"hostile": tc.name}}, nil), http.StatusUnprocessableEntity, tc.code)
			for _, want := range []string{ref, tc.says} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not say %q", msg, want)
				}
			}
			for _, engineText := range []string{"daemon", "sha256:", "runtime:", "unix://"} {
				if strings.Contains(msg, engineText) {
					t.Errorf("message %q carries %q", msg, engineText)
				}
			}
			if list := apitest.DecodeData[[]apitest.Sandbox](t, cc.Do("GET", "/sandboxes?label=hostile="+tc.name, tokA, nil, nil)); len(list) != 0 {
				t.Errorf("a refused create left sandboxes: %+v", list)
			}
		})
	}
}

// TestFilesInAnImageWithoutAShell: an image may hold no shell and no tools
// at all. Its sandbox's files are still written and read, by the agent's
// own write and cat, with the same answers as anywhere else, in a sandbox
// that waits for commands and in a run-mode one alike; before, a write (and
// in run mode a read too) ran a shell script and answered 500 "exit code
// 127".
func TestFilesInAnImageWithoutAShell(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	ref := buildImage(t, "", "FROM scratch\nCOPY Dockerfile /no-shell/Dockerfile\n")
	for _, mode := range []string{"commands", "run mode"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cc := *c.Client
			cc.T = t
			body := map[string]any{"image": ref, "labels": map[string]string{"image": "no-shell"}}
			if mode == "run mode" {
				// The image has no program: the agent binary, which every
				// sandbox has read-only at /.rarecloud-agent, waits for a
				// signal when nothing talks to it.
				body["cmd"] = []string{"/.rarecloud-agent"}
			}
			id := cc.Running(tokA, body).ID
			if mode == "commands" {
				// The image has no shell indeed: a command cannot start one.
				if out := cc.Command(tokA, id, "true", 0); exitCode(t, out) != 127 {
					t.Fatalf("a command in an image without a shell: %+v, want exit 127", out)
				}
			}
			files := "/sandboxes/" + id + "/files"
			write := func(path, content string) apitest.Response {
				return cc.Do("PUT", files, tokA, map[string]any{"path": path, "content": content}, nil)
			}
			for _, path := range []string{"/home/user/notes/a.txt", "/tmp/b.txt", "/home/user/notes/a.txt"} {
				content := "written to " + path + " at " + time.Now().String()
				if r := write(path, content); r.Status != http.StatusOK {
					t.Fatalf("write %s: %v", path, r)
				}
				if got := apitest.DecodeData[struct{ Content string }](t, cc.Do("GET", files+"?path="+path, tokA, nil, nil)); got.Content != content {
					t.Fatalf("read %s back: %q", path, got.Content)
				}
			}
			apitest.ExpectErr(t, write("/no-shell/Dockerfile", "x"), http.StatusForbidden, "PERMISSION_DENIED")
			apitest.ExpectErr(t, write("/home/user/notes/a.txt/x", "x"), http.StatusBadRequest, "INVALID_PATH")
			apitest.ExpectErr(t, write("/home/user/notes", "x"), http.StatusBadRequest, "IS_A_DIRECTORY")
			apitest.ExpectErr(t, write("/dev/null", "x"), http.StatusBadRequest, "FILE_NOT_REGULAR")
			apitest.ExpectErr(t, cc.Do("GET", files+"?path=/dev/zero", tokA, nil, nil), http.StatusBadRequest, "FILE_NOT_REGULAR")
			apitest.ExpectErr(t, cc.Do("GET", files+"?path=/home/user/none", tokA, nil, nil), http.StatusNotFound, "FILE_NOT_FOUND")
		})
	}
}
