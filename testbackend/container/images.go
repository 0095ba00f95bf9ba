package container

import (
	"errors"
	"time"
)

// DefaultPullTimeout bounds one pull, shared by every create waiting for
// it: the runtime's bound and the lifecycle's wait, unless the backend is
// configured otherwise (IMAGES.md, "Pulls").
const DefaultPullTimeout = 5 * time.Minute

// ErrImageRefused means the image breaks one of a runtime's image rules
// (for the Docker runtime, package docker's image_policy.go and
// registry.go); the error is an *ImageRefusedError.
var ErrImageRefused = errors.New("image refused")

// Rules an image can break, ImageRefusedError.Rule; the sandbox package
// maps each onto an API code.
const (
	RulePlatform = "platform" // another OS or architecture than the engine's
	RuleVolumes  = "volumes"  // a VOLUME the backend cannot turn into a tmpfs
	RuleRegistry = "registry" // the registry's address is not a public one
	RulePrivate  = "private"  // the registry wants credentials
	RuleTooLarge = "too-large"
	RulePull     = "pull" // any other pull failure; the message is the backend's own
)

// ImageRefusedError says why an image is refused. Msg is for API clients:
// it names the image and the rule, and carries nothing the engine said.
type ImageRefusedError struct {
	Image string
	Rule  string
	Msg   string
}

func (e *ImageRefusedError) Error() string        { return e.Msg }
func (e *ImageRefusedError) Is(target error) bool { return target == ErrImageRefused }

// StartRefusedError is a start that failed for what the sandbox's owner
// chose: a run-mode program that is not in its image. Msg is for API
// clients and carries nothing the engine said; Err is the engine's
// answer, for the backend's log.
type StartRefusedError struct {
	Msg string
	Err error
}

func (e *StartRefusedError) Error() string { return e.Msg + ": " + e.Err.Error() }
func (e *StartRefusedError) Unwrap() error { return e.Err }
