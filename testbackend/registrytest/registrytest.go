// Package registrytest runs a real OCI registry (go-containerregistry's
// pkg/registry) in the test process on 127.0.0.1, counts what is asked of
// it, and pushes images the test builds on this machine: nothing comes
// from outside it.
package registrytest

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Request is one request the registry answered.
type Request struct {
	Method, Path, UserAgent string
	Status                  int
}

// Registry is a registry on 127.0.0.1:PORT.
type Registry struct {
	Host     string // 127.0.0.1:PORT, as image references name it
	user, pw string
	inner    http.Handler
	conns    atomic.Int64

	mu       sync.Mutex
	reqs     []Request
	redirect string // base URL blob GETs are sent to (307), or ""
}

// Options configure Start. With User set, every request needs basic auth.
type Options struct {
	User, Password string
}

// Start serves a registry until the test ends.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	r, stop := Serve(opts)
	t.Cleanup(stop)
	return r
}

// Serve serves a registry until stop is called (for a TestMain).
func Serve(opts Options) (r *Registry, stop func()) {
	r = &Registry{user: opts.User, pw: opts.Password}
	inner := registry.New(registry.Logger(nopLogger()))
	r.inner = inner
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: 200}
		if r.user != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.user || p != r.pw {
				w.Header().Set("WWW-Authenticate", `Basic realm="registrytest"`)
				rec.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(rec, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				r.record(req, rec.status)
				return
			}
		}
		if to := r.redirectTo(); to != "" && req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") {
			http.Redirect(rec, req, to+req.URL.Path, http.StatusTemporaryRedirect)
			r.record(req, rec.status)
			return
		}
		inner.ServeHTTP(rec, req)
		r.record(req, rec.status)
	}))
	srv.Listener = &countingListener{Listener: srv.Listener, n: &r.conns}
	srv.Start()
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r, srv.Close
}

// Conns is how many connections the registry's listener accepted.
func (r *Registry) Conns() int64 { return r.conns.Load() }

func (r *Registry) redirectTo() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.redirect
}

// Mirror is a second listener on 127.0.0.1 that serves a registry's
// blobs, as the CDN a registry redirects blob downloads to does, and
// counts the connections it accepts and the blob GETs it answers.
type Mirror struct {
	Host  string // 127.0.0.1:PORT
	conns atomic.Int64
	blobs atomic.Int64
}

// Conns is how many connections the mirror's listener accepted.
func (m *Mirror) Conns() int64 { return m.conns.Load() }

// BlobGETs is how many blob GETs the mirror answered.
func (m *Mirror) BlobGETs() int64 { return m.blobs.Load() }

// RedirectBlobs starts a Mirror until the test ends and from then on
// answers every blob GET with a 307 to the same path on it.
func (r *Registry) RedirectBlobs(t testing.TB) *Mirror {
	t.Helper()
	m := &Mirror{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/sha256:") {
			m.blobs.Add(1)
		}
		r.inner.ServeHTTP(w, req)
	}))
	srv.Listener = &countingListener{Listener: srv.Listener, n: &m.conns}
	srv.Start()
	t.Cleanup(srv.Close)
	m.Host = strings.TrimPrefix(srv.URL, "http://")
	r.mu.Lock()
	r.redirect = srv.URL
	r.mu.Unlock()
	return m
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func (r *Registry) record(req *http.Request, status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, Request{Method: req.Method, Path: req.URL.Path, UserAgent: req.UserAgent(), Status: status})
}

// Requests is every request so far.
func (r *Registry) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// Count is how many requests so far match.
func (r *Registry) Count(match func(Request) bool) int {
	n := 0
	for _, q := range r.Requests() {
		if match(q) {
			n++
		}
	}
	return n
}

// ManifestGETs counts the GETs of repo's manifests (by tag or digest).
func (r *Registry) ManifestGETs(repo string) int {
	return r.Count(func(q Request) bool {
		return q.Method == http.MethodGet && strings.HasPrefix(q.Path, "/v2/"+repo+"/manifests/")
	})
}

// BlobGETs counts the GETs of one blob of repo (a pull fetches the
// config blob once).
func (r *Registry) BlobGETs(repo string, h v1.Hash) int {
	return r.Count(func(q Request) bool {
		return q.Method == http.MethodGet && q.Path == "/v2/"+repo+"/blobs/"+h.String()
	})
}

// Push writes img as repo:tag and returns its reference.
func (r *Registry) Push(t testing.TB, repoTag string, img v1.Image) string {
	t.Helper()
	ref, err := r.PushImage(repoTag, img)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// PushImage is Push returning its error.
func (r *Registry) PushImage(repoTag string, img v1.Image) (string, error) {
	ref := r.Host + "/" + repoTag
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	auth := authn.Anonymous
	if r.user != "" {
		auth = &authn.Basic{Username: r.user, Password: r.pw}
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithAuth(auth)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref, nil
}

// Unnamed is msg with the image reference ref and its registry
// (host:port) replaced by placeholders: what is left of an answer that
// must name the image but carry nothing of the registry's own words.
// The registry's random port may hold any digits (38307, 34011), which a
// check for a status code in the whole answer would take for a leak.
func Unnamed(msg, ref string) string {
	registry, _, _ := strings.Cut(ref, "/")
	return strings.ReplaceAll(strings.ReplaceAll(msg, ref, "IMAGE"), registry, "REGISTRY")
}

// RandomImage is an image of layers random layers of size bytes each
// (not runnable: for pulls, sizes and removal).
func RandomImage(t testing.TB, size int64, layers int64) v1.Image {
	t.Helper()
	img, err := random.Image(size, layers)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

var (
	baseOnce sync.Once
	basePath string
	baseErr  error
)

// BaseImage is the engine's rarecloud/sandbox-base:latest (docker save,
// once per process) with a small random layer on top, so each call is an
// image the engine does not have yet, and one that runs.
func BaseImage(t testing.TB, dockerHost string) v1.Image {
	t.Helper()
	base := TemplateImage(t, dockerHost)
	l, err := random.Layer(512, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, l)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TemplateImage is the engine's rarecloud/sandbox-base:latest as it is
// (docker save, once per process): pulled, it is the template's image.
func TemplateImage(t testing.TB, dockerHost string) v1.Image {
	t.Helper()
	baseOnce.Do(func() {
		basePath, baseErr = saveBase(dockerHost)
	})
	if baseErr != nil {
		t.Fatalf("docker save rarecloud/sandbox-base:latest: %v", baseErr)
	}
	tag, err := name.NewTag("rarecloud/sandbox-base:latest")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(basePath, &tag)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Cleanup removes the saved base image; TestMain calls it.
func Cleanup() {
	if basePath != "" {
		os.RemoveAll(filepath.Dir(basePath))
	}
}

func saveBase(host string) (string, error) {
	cli, err := dockerclient.NewClientWithOpts(dockerclient.WithHost(host), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return "", err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rc, err := cli.ImageSave(ctx, []string{"rarecloud/sandbox-base:latest"})
	if err != nil {
		return "", err
	}
	defer rc.Close()
	dir, err := os.MkdirTemp("", "rarecloud-registrytest-")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "base.tar")
	f, err := os.Create(p)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return "", err
	}
	return p, f.Close()
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func nopLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// RemoveImageLater removes ref's image from the engine at host when the
// test ends (the images these tests push are their own: a random layer on
// top).
func RemoveImageLater(t *testing.T, host, ref string) {
	t.Cleanup(func() {
		cli, err := dockerclient.NewClientWithOpts(dockerclient.WithHost(host), dockerclient.WithAPIVersionNegotiation())
		if err != nil {
			return
		}
		defer cli.Close()
		// The backend removes a deleted sandbox's container in the
		// background, and an image a running container uses stays: try
		// until it is gone.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		img, err := cli.ImageInspect(ctx, ref)
		if err != nil {
			return
		}
		for {
			_, err := cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
			if err == nil || cerrdefs.IsNotFound(err) || ctx.Err() != nil {
				if err != nil {
					t.Logf("cleanup: image %s stays: %v", ref, err)
				}
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
}
