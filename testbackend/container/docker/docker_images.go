package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Pull limits and their defaults (IMAGES.md, "Pulls"); the pull's time
// bound is container.DefaultPullTimeout.
const (
	DefaultMaxImageBytes    = 2 << 30  // unpacked, as the engine reports it
	DefaultMaxDownloadBytes = 1 << 30  // compressed, as the manifest declares it
	DefaultImageBudgetBytes = 20 << 30 // pulled images kept on the engine
)

// privateImageMsg is the docs' answer for an image that needs credentials.
const privateImageMsg = "Private custom images are not supported yet, only public ones"

// EnsureImage makes ref present: nil when it is, a pull when the policy
// allows, ErrImageUnavailable otherwise. A present image the backend will
// not run (image_policy.go) is ErrImageRefused; so is a pull the registry
// policy (registry.go) or the limits refuse, and a pull that fails: the
// error's message is the backend's own, never the engine's or the
// registry's. Concurrent calls for one reference share one pull, and
// pulls wait for a slot (pull_gate.go): one the gate will not start now
// is a *container.PullLaterError.
func (d *Runtime) EnsureImage(ctx context.Context, ref string) error {
	img, err := d.cli.ImageInspect(ctx, ref)
	if err == nil {
		d.touchImage(ref)
		return d.checkImage(ctx, ref, img)
	}
	// An engine older than the reference grammar (20.10 and "[::1]:5000/x")
	// cannot look the image up: it is not there, and the pull's rules decide.
	if !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "invalid reference format") {
		return d.engineErr("inspect image "+ref, err)
	}
	if d.pull == PullNever {
		return fmt.Errorf("%w: %s is not present on %s and the pull policy is %q", container.ErrImageUnavailable, ref, d.host, PullNever)
	}
	if err := d.sharedPull(ctx, ref); err != nil {
		return err
	}
	img, err = d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if isEngineDown(err) {
			return d.engineErr("inspect image "+ref, err)
		}
		return pullFailed(ref)
	}
	return d.checkImage(ctx, ref, img)
}

// pullImage checks ref's registry, downloads the image itself (see
// download: the engine never connects to a registry), streams it into the
// engine, tags it as ref and checks the unpacked size.
func (d *Runtime) pullImage(ref string) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.pullTimeout)
	defer cancel()
	if err := d.registries.check(ctx, ref); err != nil {
		return err
	}
	dl, err := d.newDownload(ref)
	if err != nil {
		return err
	}
	defer dl.close()
	img, err := d.fetchManifest(ctx, dl)
	if err != nil {
		return err
	}
	id, err := d.loadImage(ctx, dl, img)
	if err != nil {
		return err
	}
	if err := d.cli.ImageTag(ctx, id, ref); err != nil {
		d.removeUntagged(id)
		if isEngineDown(err) {
			return d.engineErr("tag image "+ref, err)
		}
		return pullFailed(ref)
	}
	inspected, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if isEngineDown(err) {
			return d.engineErr("inspect image "+ref, err)
		}
		return pullFailed(ref)
	}
	if inspected.Size > d.maxImageBytes {
		d.removeRefs(ref)
		return &container.ImageRefusedError{Image: ref, Rule: container.RuleTooLarge, Msg: fmt.Sprintf(
			"use a smaller image: image %q unpacks to %d bytes, over the backend's limit of %d", ref, inspected.Size, d.maxImageBytes)}
	}
	d.pulledImage(ref, inspected)
	d.collectImages(ctx, ref)
	return nil
}

// download is one pull's way to the registry. Every connection it makes,
// to the registry and to each host a redirect names (registries hand blob
// downloads to CDNs that way), goes through pullDialer, which applies the
// registry policy to the address actually dialed; no proxy is used. Every
// byte it reads is counted, and reading stops past the limit.
type download struct {
	ref    string
	r      name.Reference
	dialer *pullDialer
	tr     *http.Transport
	count  *byteCounter
}

// downloadAllowance is what a download may read beyond the sizes its
// manifest declares (config plus layers): token answers and the like.
const downloadAllowance = 1 << 20

func (d *Runtime) newDownload(ref string) (*download, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, pullFailed(ref)
	}
	// An allowed registry may speak plain HTTP (go-containerregistry tries
	// HTTPS first); any other only HTTPS, as the engine pulled before (it
	// spoke HTTP to 127.0.0.0/8 alone, which is never an unallowed
	// registry's address).
	var nopts []name.Option
	if d.registries.allowed(strings.ToLower(reference.Domain(named))) {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(reference.TagNameOnly(named).String(), nopts...)
	if err != nil {
		return nil, pullFailed(ref)
	}
	dialer := &pullDialer{policy: d.registries}
	tr := &http.Transport{
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true, // count the bytes as sent, and unpack nothing
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       30 * time.Second,
	}
	count := &byteCounter{}
	count.limit.Store(d.maxDownloadBytes + downloadAllowance)
	return &download{ref: ref, r: r, dialer: dialer, tr: tr, count: count}, nil
}

func (dl *download) close() { dl.tr.CloseIdleConnections() }

func (dl *download) options(ctx context.Context, osys, arch string) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(&countingTransport{rt: dl.tr, count: dl.count}),
		remote.WithUserAgent("rarecloud-testbackend"), remote.WithPlatform(v1.Platform{OS: osys, Architecture: arch})}
}

// fetchManifest fetches ref's manifest for this engine's platform and
// refuses an image whose declared compressed size is over the limit,
// before any blob is read. From then on the download may read no more
// than what it has read so far plus the declared sizes.
func (d *Runtime) fetchManifest(ctx context.Context, dl *download) (v1.Image, error) {
	osys, arch, err := d.enginePlatform(ctx)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(dl.r, dl.options(ctx, osys, arch)...)
	if err != nil {
		return nil, d.registryErr(dl, err)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, d.registryErr(dl, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, d.registryErr(dl, err)
	}
	if m.Config.Size < 0 {
		return nil, pullFailed(dl.ref)
	}
	total := m.Config.Size
	for _, l := range m.Layers {
		if l.Size < 0 {
			return nil, pullFailed(dl.ref)
		}
		total += l.Size
	}
	if total > d.maxDownloadBytes {
		return nil, &container.ImageRefusedError{Image: dl.ref, Rule: container.RuleTooLarge, Msg: fmt.Sprintf(
			"use a smaller image: image %q declares %d compressed bytes, over the backend's limit of %d", dl.ref, total, d.maxDownloadBytes)}
	}
	dl.count.limit.Store(dl.count.n.Load() + total + downloadAllowance)
	return img, nil
}

// loadImage streams img into the engine as a docker-archive (written as
// it downloads, through a pipe) and returns the id of the image loaded.
// The archive names no tag: the caller tags the image as the reference
// asked for. A failure is the backend's own answer: the download's when
// the download failed, else the engine's, never what either said.
func (d *Runtime) loadImage(ctx context.Context, dl *download, img v1.Image) (string, error) {
	id, err := img.ConfigName()
	if err != nil {
		return "", d.registryErr(dl, err)
	}
	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		err := tarball.Write(dl.r.Context().Digest(id.String()), img, pw)
		pw.CloseWithError(err)
		written <- err
	}()
	loaded, loadErr := d.engineLoad(ctx, pr)
	pr.CloseWithError(errLoadEnded) // a writer still writing stops
	writeErr := <-written
	if writeErr != nil && !errors.Is(writeErr, errLoadEnded) {
		if loaded != "" {
			d.removeUntagged(loaded)
		}
		return "", d.registryErr(dl, writeErr)
	}
	if loadErr != nil {
		if isEngineDown(loadErr) {
			return "", d.engineErr("load image "+dl.ref, loadErr)
		}
		return "", pullFailed(dl.ref)
	}
	if loaded == "" {
		loaded = id.String()
	}
	return loaded, nil
}

// errLoadEnded stops the archive's writer once the engine stopped reading.
var errLoadEnded = errors.New("the engine's load ended")

// engineLoad has the engine load the archive r and returns the image id
// it reports; its errors never reach the client.
func (d *Runtime) engineLoad(ctx context.Context, r io.Reader) (string, error) {
	resp, err := d.cli.ImageLoad(ctx, r, client.ImageLoadWithQuiet(true))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if !resp.JSON {
		_, err := io.Copy(io.Discard, resp.Body)
		return "", err
	}
	var id string
	dec := json.NewDecoder(resp.Body)
	for {
		var msg jsonmessage.JSONMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return id, nil
			}
			return "", err
		}
		if msg.Error != nil {
			return "", errors.New(msg.Error.Message)
		}
		if s, ok := strings.CutPrefix(strings.TrimSpace(msg.Stream), "Loaded image ID: "); ok {
			id = s
		}
	}
}

// removeUntagged removes image id when no tag names it: a load whose
// tagging failed leaves nothing behind, and an image that was already on
// the engine under a tag of its own stays.
func (d *Runtime) removeUntagged(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img, err := d.cli.ImageInspect(ctx, id)
	if err != nil || len(img.RepoTags) > 0 {
		return
	}
	_, _ = d.cli.ImageRemove(ctx, id, image.RemoveOptions{PruneChildren: true})
}

// errDownloadTooLarge ends a download that read more than it may.
var errDownloadTooLarge = errors.New("the download read more than its limit")

// byteCounter counts what one download read, against a limit.
type byteCounter struct {
	n, limit atomic.Int64
}

// countingTransport counts the bytes of every answer's body.
type countingTransport struct {
	rt    http.RoundTripper
	count *byteCounter
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, count: t.count}
	return resp, nil
}

type countedBody struct {
	io.ReadCloser
	count *byteCounter
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.count.n.Add(int64(n)) > b.count.limit.Load() {
		return n, errDownloadTooLarge
	}
	return n, err
}

// registryErr is the client's answer to a failed download: the
// registry refusal when the policy refused a connection the download
// tried (the registry's, or a redirect's), the too-large one when it read
// past its limit, the private-image answer when the registry wants
// credentials, else a generic one. What the registry said is not in it.
func (d *Runtime) registryErr(dl *download, err error) error {
	if bd := dl.dialer.refusal(); bd != nil || errors.Is(err, errBlockedDial) {
		why := "a blocked"
		if bd != nil {
			why = bd.why
		}
		return downloadRefused(dl.ref, why)
	}
	if errors.Is(err, errDownloadTooLarge) {
		return &container.ImageRefusedError{Image: dl.ref, Rule: container.RuleTooLarge, Msg: fmt.Sprintf(
			"use a smaller image: image %q sent more than its declared size (at most %d compressed bytes)", dl.ref, d.maxDownloadBytes)}
	}
	return sanitizedErr(dl.ref, err)
}

// sanitizedErr is the private-image answer when err says the registry
// wants credentials, else the generic one.
func sanitizedErr(ref string, err error) error {
	if needsAuth(err) {
		return &container.ImageRefusedError{Image: ref, Rule: container.RulePrivate, Msg: fmt.Sprintf(
			"use a public image: image %q needs registry credentials. %s", ref, privateImageMsg)}
	}
	return pullFailed(ref)
}

func needsAuth(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) {
		return true
	}
	s := strings.ToLower(err.Error())
	for _, w := range []string{"no basic auth credentials", "unauthorized", "denied", "authentication required"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

func pullFailed(ref string) *container.ImageRefusedError {
	return &container.ImageRefusedError{Image: ref, Rule: container.RulePull, Msg: fmt.Sprintf(
		"image %q could not be pulled from its registry; check that it exists and is public", ref)}
}
