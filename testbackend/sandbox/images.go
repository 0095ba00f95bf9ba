package sandbox

import (
	"errors"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Error codes of the image rules (container/image_policy.go, IMAGES.md).
// Extensions of v1.
const (
	// CodeImageNotAllowed: the image's metadata breaks a rule of the
	// backend, a VOLUME it will not turn into a tmpfs (422).
	CodeImageNotAllowed = "IMAGE_NOT_ALLOWED"
	// CodeImagePlatformMismatch: the image is for another OS or
	// architecture than the engine's (422).
	CodeImagePlatformMismatch = "IMAGE_PLATFORM_MISMATCH"
)

// imageRefused is the API's answer to an image the runtime refuses, or nil
// when err is no refusal. The message is the runtime's own for clients: it
// names the image and the rule, and carries nothing the engine said.
func imageRefused(err error) *Error {
	var r *container.ImageRefusedError
	if !errors.As(err, &r) {
		return nil
	}
	code := CodeImageNotAllowed
	if r.Rule == container.RulePlatform {
		code = CodeImagePlatformMismatch
	}
	return &Error{Code: code, Message: r.Msg}
}
