package provider

import (
	"context"
	"encoding/base64"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

// Limits of files in a sandbox.
const (
	// maxFileChars is the API's limit of one file write, in characters.
	maxFileChars = 1_000_000
	// maxUploadBytes bounds a binary upload (content_base64 or source).
	maxUploadBytes = 64 << 20
	maxPathBytes   = 4096
	maxNameBytes   = 255
)

// writableRoots are the sandbox's writable areas: the rest of its file
// system is read-only.
var writableRoots = []string{"/home/user/", "/tmp/"}

// sandboxPathProblem says what is wrong with a path of a file in a
// sandbox, or "" when nothing is. With writable, the path must lie in
// one of the writable areas.
func sandboxPathProblem(p string, writable bool) string {
	switch {
	case p == "":
		return "the path is empty"
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q is not absolute: the path must start with /, for example /home/user/%s", p, strings.TrimPrefix(p, "./"))
	case !utf8.ValidString(p):
		return "the path is not valid UTF-8"
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Sprintf("%q contains a control character (such as a newline or NUL)", p)
	case len(p) > maxPathBytes:
		return fmt.Sprintf("the path is %d bytes long; at most %d are allowed", len(p), maxPathBytes)
	case path.Clean(p) != p:
		return fmt.Sprintf("%q is not in its clean form (no \".\" or \"..\" parts, no doubled or trailing slash); write %q", p, path.Clean(p))
	}
	for _, part := range strings.Split(p, "/") {
		if len(part) > maxNameBytes {
			return fmt.Sprintf("a name in %q is %d bytes long; the file system allows at most %d per name", p, len(part), maxNameBytes)
		}
	}
	if writable {
		for _, root := range writableRoots {
			if strings.HasPrefix(p, root) {
				return ""
			}
		}
		return fmt.Sprintf("%q is outside the sandbox's writable areas: a file must be under /home/user/ or /tmp/ "+
			"(the rest of the file system is read-only)", p)
	}
	return ""
}

// sandboxPathValidator checks a path of a file in a sandbox at plan.
type sandboxPathValidator struct{ writable bool }

var _ validator.String = sandboxPathValidator{}

func (v sandboxPathValidator) Description(context.Context) string {
	if v.writable {
		return "an absolute, clean path under /home/user/ or /tmp/"
	}
	return "an absolute, clean path"
}

func (v sandboxPathValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v sandboxPathValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if problem := sandboxPathProblem(req.ConfigValue.ValueString(), v.writable); problem != "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid sandbox file path", capitalize(problem)+".")
	}
}

// fileContentValidator checks text content: valid UTF-8 and within the
// API's limit of characters.
type fileContentValidator struct{}

var _ validator.String = fileContentValidator{}

func (fileContentValidator) Description(context.Context) string {
	return fmt.Sprintf("valid UTF-8 text of at most %d characters", maxFileChars)
}

func (v fileContentValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (fileContentValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	s := req.ConfigValue.ValueString()
	if problem := textContentProblem(s); problem != "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid file content", problem)
	}
}

// textContentProblem says why s cannot be written as a text file.
func textContentProblem(s string) string {
	if !utf8.ValidString(s) {
		return "content is not valid UTF-8 text. Binary data goes in content_base64 (for example filebase64(...)) or source."
	}
	if n := utf8.RuneCountInString(s); n > maxFileChars {
		return fmt.Sprintf("content is %d characters long; the RareCloud API writes at most %d characters in one file. "+
			"Use source (a local file) or content_base64 for bigger files: they are uploaded in parts of up to %d bytes in all.",
			n, maxFileChars, maxUploadBytes)
	}
	return ""
}

// base64ContentValidator checks content_base64: standard base64 (with
// padding) of at most maxUploadBytes bytes.
type base64ContentValidator struct{}

var _ validator.String = base64ContentValidator{}

func (base64ContentValidator) Description(context.Context) string {
	return fmt.Sprintf("standard base64 of at most %d bytes", maxUploadBytes)
}

func (v base64ContentValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (base64ContentValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if _, err := decodeContentBase64(req.ConfigValue.ValueString()); err != nil {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid content_base64", capitalize(err.Error())+".")
	}
}

// decodeContentBase64 decodes content_base64 within the upload limit.
func decodeContentBase64(s string) ([]byte, error) {
	if base64.StdEncoding.DecodedLen(len(s)) > maxUploadBytes+3 {
		return nil, fmt.Errorf("content_base64 decodes to more than %d bytes, the limit of one file upload", maxUploadBytes)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("content_base64 is not valid standard base64 (%v); use base64encode(...) or filebase64(...)", err)
	}
	if len(b) > maxUploadBytes {
		return nil, fmt.Errorf("content_base64 decodes to %d bytes; at most %d can be uploaded as one file", len(b), maxUploadBytes)
	}
	return b, nil
}
