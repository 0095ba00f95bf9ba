package api_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/registrytest"
)

// pullingBackend is a backend of its own that pulls missing images,
// from allowed registries whatever their address.
func pullingBackend(t *testing.T, allowed ...string) *client {
	t.Helper()
	b, err := startBackend(t.TempDir(), testbackend.Config{Pull: "missing", AllowRegistries: allowed, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return newClient(t, b.URL())
}

// By default a registry on a loopback, private or link-local address, or
// a name resolving to one, is refused with 422, before anything connects
// to it: the registry on this machine, holding the image, sees nothing.
func TestCreateRefusesBlockedRegistry(t *testing.T) {
	t.Parallel()
	c := pullingBackend(t)
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, "team/vol:1", registrytest.RandomImage(t, 1024, 1))
	_, port, _ := strings.Cut(reg.Host, ":")
	pushed := len(reg.Requests())
	for _, img := range []string{
		ref,
		"localhost:" + port + "/team/vol:1",
		"10.0.0.1/x:1",
		"192.168.1.1:5000/x:1",
		"169.254.169.254/x:1",
		"[::1]:5000/x:1",
		"100.64.0.1/x:1",
	} {
		t.Run(img, func(t *testing.T) {
			cc := *c.Client
			cc.T = t
			msg := apitest.ExpectErr(t, cc.Do("POST", "/sandboxes", tokA, map[string]any{"image": img}, nil), http.StatusUnprocessableEntity, "IMAGE_REGISTRY_NOT_ALLOWED")
			if !strings.Contains(msg, img) || !strings.Contains(msg, "public") {
				t.Errorf("message %q does not name the image and the rule", msg)
			}
		})
	}
	if got := len(reg.Requests()); got != pushed {
		t.Fatalf("the registry on loopback saw %d requests after the push: %+v", got-pushed, reg.Requests()[pushed:])
	}
}

// With the registry allowed, a custom image is pulled from it and the
// sandbox runs it.
func TestCreatePullsFromAllowedRegistry(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, registrytest.Options{})
	ref := reg.Push(t, "team/app:1", registrytest.BaseImage(t, shared0Host(t)))
	registrytest.RemoveImageLater(t, shared0Host(t), ref)
	c := pullingBackend(t, reg.Host)
	sb := c.Running(tokA, map[string]any{"image": ref})
	if sb.Image != ref {
		t.Errorf("sandbox image %q, want %q", sb.Image, ref)
	}
	r := c.Command(tokA, sb.ID, "id -u", 0)
	if strings.TrimSpace(r.Stdout) != "10001" {
		t.Fatalf("id -u in a sandbox of %s: %v", ref, r)
	}
	if reg.ManifestGETs("team/app") == 0 {
		t.Fatal("the registry saw no manifest request: the image did not come from it")
	}
}

// A registry that wants credentials gets the private-image answer, with
// nothing of what the registry or the engine said.
func TestCreatePrivateImage(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, registrytest.Options{User: "team", Password: "s3cret"})
	ref := reg.Push(t, "team/py:1", registrytest.RandomImage(t, 1024, 1))
	c := pullingBackend(t, reg.Host)
	msg := apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"image": ref}, nil), http.StatusUnprocessableEntity, "IMAGE_PRIVATE_NOT_SUPPORTED")
	if !strings.Contains(msg, ref) || !strings.Contains(msg, "Private custom images are not supported yet, only public ones") {
		t.Errorf("message %q does not name the image and say private images are not supported", msg)
	}
	for _, leak := range []string{"Head", "http://", "no basic auth", "UNAUTHORIZED", "authentication required", "401"} {
		if strings.Contains(registrytest.Unnamed(msg, ref), leak) {
			t.Errorf("message %q carries the registry's or the engine's text %q", msg, leak)
		}
	}
}

// An image that does not exist, or a registry that does not resolve (here
// Docker Hub too: this machine has no internet), is
// IMAGE_PULL_FAILED with the backend's own words.
func TestCreateMissingImageSanitized(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, registrytest.Options{})
	c := pullingBackend(t, reg.Host)
	for _, img := range []string{reg.Host + "/team/nothing:1", "registry.invalid/nothing/here:1", "nginx:1.27"} {
		msg := apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"image": img}, nil), http.StatusUnprocessableEntity, "IMAGE_PULL_FAILED")
		if !strings.Contains(msg, img) {
			t.Errorf("message %q does not name the image", msg)
		}
		for _, leak := range []string{"http://", "MANIFEST_UNKNOWN", "manifest unknown", "no such host", "lookup", "Get \""} {
			if strings.Contains(msg, leak) {
				t.Errorf("message %q carries what the registry, the resolver or the engine said (%q)", msg, leak)
			}
		}
	}
}

// shared0Host is the engine the tests' backends use.
func shared0Host(t *testing.T) string {
	t.Helper()
	realBackend(t)
	return shared.Runtime().Address()
}

// Ten creates at once of one image that is not on the engine cause one
// pull, counted at the registry: one manifest fetch by tag and one fetch
// of the image's config blob (the backend downloads; the engine loads).
func TestConcurrentCreatesSharePull(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, registrytest.Options{})
	img := registrytest.BaseImage(t, shared0Host(t))
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Push(t, "team/once:1", img)
	registrytest.RemoveImageLater(t, shared0Host(t), ref)
	c := pullingBackend(t, reg.Host)
	var wg sync.WaitGroup
	status := make([]int, 10)
	for i := range status {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, env := c.Raw("POST", "/sandboxes", tokA, map[string]any{"image": ref}, nil)
			status[i] = code
			var sb struct {
				ID string `json:"id"`
			}
			if code == http.StatusCreated && jsonUnmarshal(env.Data, &sb) == nil {
				c.Raw("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil)
			}
		}()
	}
	wg.Wait()
	for i, code := range status {
		if code != http.StatusCreated {
			t.Errorf("create %d: HTTP %d, want 201", i, code)
		}
	}
	byTag := reg.Count(func(q registrytest.Request) bool {
		return q.Method == http.MethodGet && q.Path == "/v2/team/once/manifests/1"
	})
	if blobs := reg.BlobGETs("team/once", cfg); byTag != 1 || blobs != 1 {
		t.Fatalf("10 concurrent creates: %d manifest GETs by tag and %d config blob GETs at the registry, want 1 and 1", byTag, blobs)
	}
}
