package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	digest "github.com/opencontainers/go-digest"

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

// pullFlight is one pull of a reference that every concurrent EnsureImage
// of that reference waits for.
type pullFlight struct {
	done chan struct{}
	err  error
}

// EnsureImage makes ref present: nil when it is, a pull when the policy
// allows, ErrImageUnavailable otherwise. A present image the backend will
// not run (image_policy.go) is ErrImageRefused; so is a pull the registry
// policy (registry.go) or the limits refuse, and a pull that fails: the
// error's message is the backend's own, never the engine's or the
// registry's. Concurrent calls for one reference share one pull.
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

// sharedPull waits for the pull of ref, starting it when none is under
// way. The pull runs under its own deadline (PullTimeout), so a caller
// that gives up does not fail the others.
func (d *Runtime) sharedPull(ctx context.Context, ref string) error {
	d.imgMu.Lock()
	f := d.flights[ref]
	if f == nil {
		f = &pullFlight{done: make(chan struct{})}
		d.flights[ref] = f
		go func() {
			f.err = d.pullImage(ref)
			d.imgMu.Lock()
			delete(d.flights, ref)
			d.imgMu.Unlock()
			close(f.done)
		}()
	}
	d.imgMu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return &container.ImageRefusedError{Image: ref, Rule: container.RulePull, Msg: fmt.Sprintf(
			"image %q could not be pulled in time; it may still be arriving, so try again shortly", ref)}
	}
}

// pullImage checks ref's registry, fetches its manifest to check the
// declared size, has the engine pull the digest it saw, tags it as ref and
// checks the unpacked size.
func (d *Runtime) pullImage(ref string) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.pullTimeout)
	defer cancel()
	if err := d.registries.check(ctx, ref); err != nil {
		return err
	}
	pinned, err := d.checkManifest(ctx, ref)
	if err != nil {
		return err
	}
	if err := d.enginePull(ctx, ref, pinned); err != nil {
		return err
	}
	if err := d.cli.ImageTag(ctx, pinned, ref); err != nil {
		if isEngineDown(err) {
			return d.engineErr("tag image "+ref, err)
		}
		return pullFailed(ref)
	}
	img, err := d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if isEngineDown(err) {
			return d.engineErr("inspect image "+ref, err)
		}
		return pullFailed(ref)
	}
	if img.Size > d.maxImageBytes {
		d.removeRefs(ref, pinned)
		return &container.ImageRefusedError{Image: ref, Rule: container.RuleTooLarge, Msg: fmt.Sprintf(
			"use a smaller image: image %q unpacks to %d bytes, over the backend's limit of %d", ref, img.Size, d.maxImageBytes)}
	}
	d.pulledImage(ref, pinned, img)
	d.collectImages(ctx, ref)
	return nil
}

// checkManifest fetches ref's manifest (for this engine's platform) from
// its registry itself, through a dialer that refuses blocked addresses
// unless the operator allowed the registry, refuses an image whose
// declared compressed size is over the limit, and returns the digest
// reference the engine is to pull: what was checked is what is pulled.
func (d *Runtime) checkManifest(ctx context.Context, ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", pullFailed(ref)
	}
	r, err := name.ParseReference(reference.TagNameOnly(named).String())
	if err != nil {
		return "", pullFailed(ref)
	}
	dialer := registryDialer()
	if d.registries.allowed(strings.ToLower(reference.Domain(named))) {
		dialer = &net.Dialer{Timeout: 10 * time.Second}
	}
	tr := &http.Transport{
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		MaxIdleConns:          1,
		DisableKeepAlives:     true,
	}
	defer tr.CloseIdleConnections()
	osys, arch, err := d.enginePlatform(ctx)
	if err != nil {
		return "", err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(tr), remote.WithUserAgent("rarecloud-testbackend"),
		remote.WithPlatform(v1.Platform{OS: osys, Architecture: arch})}
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return "", d.registryErr(ref, err)
	}
	img, err := desc.Image()
	if err != nil {
		return "", d.registryErr(ref, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return "", d.registryErr(ref, err)
	}
	total := m.Config.Size
	for _, l := range m.Layers {
		if l.Size < 0 {
			return "", pullFailed(ref)
		}
		total += l.Size
	}
	if total > d.maxDownloadBytes {
		return "", &container.ImageRefusedError{Image: ref, Rule: container.RuleTooLarge, Msg: fmt.Sprintf(
			"use a smaller image: image %q declares %d compressed bytes, over the backend's limit of %d", ref, total, d.maxDownloadBytes)}
	}
	dref, err := reference.WithDigest(reference.TrimNamed(named), digest.Digest(desc.Digest.String()))
	if err != nil {
		return "", pullFailed(ref)
	}
	return dref.String(), nil
}

// enginePull has the engine pull pinned; its errors never reach the client.
func (d *Runtime) enginePull(ctx context.Context, ref, pinned string) error {
	rc, err := d.cli.ImagePull(ctx, pinned, image.PullOptions{})
	if err != nil {
		if isEngineDown(err) {
			return d.engineErr("pull "+ref, err)
		}
		return d.registryErr(ref, err)
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var msg jsonmessage.JSONMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return pullFailed(ref)
		}
		if msg.Error != nil {
			return d.registryErr(ref, errors.New(msg.Error.Message))
		}
	}
}

// registryErr is the client's answer to a failed fetch or pull: the
// private-image answer when the registry wants credentials, else a
// generic one. What the registry or the engine said is not in it.
func (d *Runtime) registryErr(ref string, err error) error {
	if errors.Is(err, errBlockedDial) {
		domain, _, _ := registryOf(ref)
		return registryRefused(ref, domain, "a blocked")
	}
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
