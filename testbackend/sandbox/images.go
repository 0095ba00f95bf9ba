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
	// CodeImageRegistryNotAllowed: the image's registry resolves to an
	// address the backend does not pull from (loopback, private,
	// link-local, ...) and the operator did not allow it (422).
	CodeImageRegistryNotAllowed = "IMAGE_REGISTRY_NOT_ALLOWED"
	// CodeImagePrivateNotSupported: the registry wants credentials;
	// private images are not supported (422).
	CodeImagePrivateNotSupported = "IMAGE_PRIVATE_NOT_SUPPORTED"
	// CodeImageTooLarge: the image is over the backend's size limit,
	// compressed or unpacked (422).
	CodeImageTooLarge = "IMAGE_TOO_LARGE"
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
	switch r.Rule {
	case container.RulePlatform:
		code = CodeImagePlatformMismatch
	case container.RuleRegistry:
		code = CodeImageRegistryNotAllowed
	case container.RulePrivate:
		code = CodeImagePrivateNotSupported
	case container.RuleTooLarge:
		code = CodeImageTooLarge
	case container.RulePull:
		code = CodeImagePullFailed
	}
	return &Error{Code: code, Message: r.Msg}
}
