package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/pkg/jsonmessage"
)

// EnsureImage makes ref present: nil when it is, a pull when the policy
// allows, ErrImageUnavailable otherwise. A present image the backend will
// not run (image_policy.go) is ErrImageRefused.
func (d *Docker) EnsureImage(ctx context.Context, ref string) error {
	img, err := d.cli.ImageInspect(ctx, ref)
	if err == nil {
		return d.checkImage(ctx, ref, img)
	}
	if !cerrdefs.IsNotFound(err) {
		return d.engineErr("inspect image "+ref, err)
	}
	if d.pull == PullNever {
		return fmt.Errorf("%w: %s is not present on %s and the pull policy is %q", ErrImageUnavailable, ref, d.host, PullNever)
	}
	rc, err := d.cli.ImagePull(ctx, ref, image.PullOptions{})
	if err != nil {
		if isEngineDown(err) {
			return d.engineErr("pull "+ref, err)
		}
		return fmt.Errorf("%w: pulling %s: %v", ErrImageUnavailable, ref, err)
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var msg jsonmessage.JSONMessage
		if err := dec.Decode(&msg); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%w: pulling %s: %v", ErrImageUnavailable, ref, ctx.Err())
			}
			return fmt.Errorf("%w: pulling %s: reading the progress stream: %v", ErrImageUnavailable, ref, err)
		}
		if msg.Error != nil {
			return fmt.Errorf("%w: pulling %s: %s", ErrImageUnavailable, ref, msg.Error.Message)
		}
	}
	img, err = d.cli.ImageInspect(ctx, ref)
	if err != nil {
		if isEngineDown(err) {
			return d.engineErr("inspect image "+ref, err)
		}
		return fmt.Errorf("%w: %s still missing after the pull: %v", ErrImageUnavailable, ref, err)
	}
	return d.checkImage(ctx, ref, img)
}
