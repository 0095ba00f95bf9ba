package api_test

import (
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// TestErrorsDoNotEchoLongValues: a refused value of a client's, as long
// as the body limit allows, is quoted back in the error message cut to
// sandbox.MaxEcho bytes, so that an answer costs no more than a small
// part of the request that caused it (quoted whole and escaped, a value
// of U+0085 came back 3.5 times its size). A short value is still quoted
// whole: the client sees which one is meant.
func TestErrorsDoNotEchoLongValues(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	id := c.Create(tokA, map[string]any{}).ID
	long := strings.Repeat("\u0085<", 1<<18) // 768 KiB; escaped, six times that
	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"template", "POST", "/sandboxes", map[string]any{"template": long}, 400, "UNKNOWN_TEMPLATE"},
		{"label key", "POST", "/sandboxes", map[string]any{"labels": map[string]string{long: "v"}}, 400, "INVALID_LABELS"},
		{"label filter", "GET", "/sandboxes?label=" + strings.Repeat("k", 60<<10) + "%3Dv", nil, 400, "INVALID_LABEL_FILTER"},
		{"environment name", "POST", "/sandboxes", map[string]any{"env": map[string]string{long: "v"}}, 400, "INVALID_ENV"},
		{"egress mode", "POST", "/sandboxes", map[string]any{"egressMode": long}, 422, "INVALID_EGRESS"},
		{"allowed name", "POST", "/sandboxes", map[string]any{"egressMode": "ALLOW_LIST", "egressAllowlist": []string{long}}, 422, "INVALID_EGRESS"},
		{"unknown field", "POST", "/sandboxes", map[string]any{long: 1}, 400, "UNKNOWN_FIELD"},
		{"language", "POST", "/sandboxes/" + id + "/run_code", map[string]any{"language": long, "code": "1"}, 400, "INVALID_LANGUAGE"},
		{"image", "POST", "/sandboxes", map[string]any{"image": "x" + long[:200]}, 400, "INVALID_IMAGE"},
	} {
		r := c.Do(tc.method, tc.path, tokA, tc.body, nil)
		msg := apitest.ExpectErr(t, r, tc.status, tc.code)
		// A value cut to MaxEcho bytes, escaped, and the message's words.
		if most := 6*sandbox.MaxEcho + 400; len(msg) > most {
			t.Errorf("%s: a message of %d bytes for a long value, at most %d allowed: %.200q…", tc.name, len(msg), most, msg)
		}
	}
	// A short value is quoted whole.
	r := c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "no-such-template"}, nil)
	if msg := apitest.ExpectErr(t, r, 400, "UNKNOWN_TEMPLATE"); !strings.Contains(msg, `"no-such-template"`) {
		t.Errorf("a short template name is not quoted whole: %q", msg)
	}
}
