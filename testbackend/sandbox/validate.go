package sandbox

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/distribution/reference"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/egressname"
)

// CreateRequest is the body of POST /v1/sandboxes.
type CreateRequest struct {
	Template   string            `json:"template,omitempty"`
	Image      string            `json:"image,omitempty"`
	TimeoutMs  *int64            `json:"timeoutMs,omitempty"`
	Run        bool              `json:"run,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Extensions of v1 (egress.go).
	EgressMode      string   `json:"egressMode,omitempty"`
	EgressAllowlist []string `json:"egressAllowlist,omitempty"`
	// IdleTimeoutMs is an extension of v1 (lifetime.go); raw, so that a
	// value of the wrong type is a bad value (422 INVALID_TIMEOUT).
	IdleTimeoutMs json.RawMessage `json:"idleTimeoutMs,omitempty"`

	idleMs int64 // IdleTimeoutMs as applied, filled in by validate
}

// Limits of the create request. They are part of the API contract
// (openapi.yaml repeats them).
const (
	DefaultTimeoutMs = 300_000
	MinTimeoutMs     = 1_000
	MaxTimeoutMs     = 24 * 60 * 60 * 1000

	MaxLabels        = 64
	MaxLabelKeyLen   = 63
	MaxLabelValueLen = 255
	MaxEnvVars       = 256
	MaxEnvKeyLen     = 255
	MaxEnvBytes      = 128 * 1024
	MaxArgs          = 256
	MaxArgBytes      = 64 * 1024
	MaxImageRefLen   = 255

	// MaxCommandLen bounds commands and code sent as one argument; Linux
	// refuses a single argument over 128 KiB.
	MaxCommandLen = 100_000
	// MaxFileChars is the documented limit of one file write.
	MaxFileChars = 1_000_000
	MaxPathLen   = 4096

	DefaultExecTimeoutMs = 60_000
	MaxExecTimeoutMs     = 600_000
	// MaxExecOutput is kept per stream; the rest is read and dropped so the
	// exit code is never lost.
	MaxExecOutput = 1 << 20
	// MaxLogBytes is the tail of a run-mode program's output that is kept.
	MaxLogBytes = 1 << 20
	// MaxReadFileBytes bounds GET /files.
	MaxReadFileBytes = 8 << 20
)

var (
	labelKeyRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_./-]*$`)
	envKeyRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// validate checks a create request and fills in defaults: every rule of
// the request, its fields' (below; idleTimeoutMs's is PATCH's too and
// lives with it, lifetime.go) and whether this backend can enforce the
// egress mode asked for (egress.go). It returns the template the sandbox
// is sized by. Create validates before it looks at the Idempotency-Key:
// nothing refused here spends one.
func (m *Manager) validate(req *CreateRequest) (Template, *Error) {
	if req.Template == "" {
		req.Template = "base"
	}
	tpl, ok := m.templates[req.Template]
	if !ok {
		return Template{}, errorf(CodeUnknownTemplate, "unknown template %q; valid templates: %s", req.Template, strings.Join(m.templateNames(), ", "))
	}
	if req.TimeoutMs == nil {
		d := int64(DefaultTimeoutMs)
		req.TimeoutMs = &d
	}
	if t := *req.TimeoutMs; t < MinTimeoutMs || t > MaxTimeoutMs {
		return Template{}, errorf(CodeInvalidTimeout, "timeoutMs must be between %d (1 s) and %d (24 h), got %d", MinTimeoutMs, MaxTimeoutMs, t)
	}
	idle, ierr := m.idleTimeout(req.IdleTimeoutMs)
	if ierr != nil {
		return Template{}, ierr
	}
	req.idleMs = idle
	if req.Image != "" {
		if err := validateImage(req.Image); err != nil {
			return Template{}, err
		}
	}
	if err := validateArgs("entrypoint", req.Entrypoint); err != nil {
		return Template{}, err
	}
	if err := validateArgs("cmd", req.Cmd); err != nil {
		return Template{}, err
	}
	if err := ValidateLabels(req.Labels); err != nil {
		return Template{}, err
	}
	if err := validateEnv(req.Env); err != nil {
		return Template{}, err
	}
	if err := validateEgress(req); err != nil {
		return Template{}, err
	}
	if err := m.checkEgressAvailable(req.EgressMode); err != nil {
		return Template{}, err
	}
	return tpl, nil
}

// validateEgress checks egressMode and egressAllowlist and fills in the
// default mode.
func validateEgress(req *CreateRequest) *Error {
	switch req.EgressMode {
	case "":
		req.EgressMode = EgressAllowAll
	case EgressAllowAll, EgressDenyAll, EgressAllowList:
	default:
		return errorf(CodeInvalidEgress, "egressMode %q is not one of %s, %s or %s", req.EgressMode, EgressAllowAll, EgressDenyAll, EgressAllowList)
	}
	if req.EgressMode != EgressAllowList {
		if req.EgressAllowlist != nil {
			return errorf(CodeInvalidEgress, "egressAllowlist is only allowed with egressMode %s (egressMode is %s)", EgressAllowList, req.EgressMode)
		}
		return nil
	}
	n := len(req.EgressAllowlist)
	switch {
	case n == 0:
		return errorf(CodeInvalidEgress, "egressMode %s needs at least one host name in egressAllowlist; to allow nothing use egressMode %s", EgressAllowList, EgressDenyAll)
	case n > MaxEgressAllowlist:
		return errorf(CodeInvalidEgress, "egressAllowlist has %d entries; at most %d are allowed", n, MaxEgressAllowlist)
	}
	seen := map[string]int{}
	for i, name := range req.EgressAllowlist {
		if err := egressname.Problem(name); err != "" {
			return errorf(CodeInvalidEgress, "egressAllowlist[%d] %q %s", i, name, err)
		}
		key := egressname.Key(name)
		if j, dup := seen[key]; dup {
			return errorf(CodeInvalidEgress, "egressAllowlist[%d] %q repeats egressAllowlist[%d]", i, name, j)
		}
		seen[key] = i
	}
	return nil
}

func validateImage(ref string) *Error {
	if len(ref) > MaxImageRefLen {
		return errorf(CodeInvalidImage, "image reference is longer than %d characters", MaxImageRefLen)
	}
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return errorf(CodeInvalidImage, "image %q is not a valid image reference: %v", ref, err)
	}
	return nil
}

func validateArgs(field string, args []string) *Error {
	if len(args) > MaxArgs {
		return errorf(CodeInvalidCommand, "%s has %d elements; at most %d are allowed", field, len(args), MaxArgs)
	}
	total := 0
	for i, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return errorf(CodeInvalidCommand, "%s[%d] contains a NUL character", field, i)
		}
		total += len(a)
	}
	if total > MaxArgBytes {
		return errorf(CodeInvalidCommand, "%s is %d bytes; at most %d are allowed", field, total, MaxArgBytes)
	}
	if len(args) > 0 && args[0] == "" && field == "entrypoint" {
		return errorf(CodeInvalidCommand, "entrypoint[0] must name a program")
	}
	return nil
}

// ValidateLabels checks label keys and values; the list filter uses it too.
func ValidateLabels(labels map[string]string) *Error {
	if len(labels) > MaxLabels {
		return errorf(CodeInvalidLabels, "%d labels given; at most %d are allowed", len(labels), MaxLabels)
	}
	for _, k := range sortedKeys(labels) {
		v := labels[k]
		if len(k) > MaxLabelKeyLen || !labelKeyRe.MatchString(k) {
			return errorf(CodeInvalidLabels, "label key %q is invalid: use 1 to %d letters, digits, '_', '.', '/' or '-', starting with a letter, digit or '_'", k, MaxLabelKeyLen)
		}
		if utf8.RuneCountInString(v) > MaxLabelValueLen || !printable(v) {
			return errorf(CodeInvalidLabels, "value of label %q is invalid: use at most %d printable characters", k, MaxLabelValueLen)
		}
	}
	return nil
}

func validateEnv(env map[string]string) *Error {
	if len(env) > MaxEnvVars {
		return errorf(CodeInvalidEnv, "%d environment variables given; at most %d are allowed", len(env), MaxEnvVars)
	}
	total := 0
	for _, k := range sortedKeys(env) {
		v := env[k]
		if len(k) > MaxEnvKeyLen || !envKeyRe.MatchString(k) {
			return errorf(CodeInvalidEnv, "environment variable name %q is invalid: use letters, digits and '_', not starting with a digit", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return errorf(CodeInvalidEnv, "value of environment variable %s contains a NUL character", k)
		}
		total += len(k) + len(v) + 2
	}
	if total > MaxEnvBytes {
		return errorf(CodeInvalidEnv, "environment is %d bytes; at most %d are allowed", total, MaxEnvBytes)
	}
	return nil
}

// ValidatePath checks a file path from the API: absolute, no NUL, bounded.
// Which paths are writable is decided inside the sandbox by its own user,
// so nothing here needs to know the sandbox's layout.
func ValidatePath(p string) *Error {
	switch {
	case p == "":
		return errorf(CodeInvalidPath, "path is required")
	case len(p) > MaxPathLen:
		return errorf(CodeInvalidPath, "path is longer than %d bytes", MaxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return errorf(CodeInvalidPath, "path contains a NUL character")
	case !strings.HasPrefix(p, "/"):
		return errorf(CodeInvalidPath, "path %q is not absolute; paths must start with /", p)
	case !utf8.ValidString(p):
		return errorf(CodeInvalidPath, "path is not valid UTF-8")
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
