package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// TestEgressValidation: every bad egressMode / egressAllowlist is refused
// with 422 INVALID_EGRESS (or 400 for a wrong JSON type) and a message
// naming the problem; good ones are recorded and shown as given; a request
// without the fields shows ALLOW_ALL.
func TestEgressValidation(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{Mode: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := newClient(t, b.URL())

	many := make([]string, sandbox.MaxEgressAllowlist+1)
	for i := range many {
		many[i] = fmt.Sprintf("host%d.example.com", i)
	}
	list := func(names ...string) map[string]any {
		return map[string]any{"egressMode": "ALLOW_LIST", "egressAllowlist": names}
	}
	cases := []struct {
		name, want string
		body       any
	}{
		{"unknown mode", "is not one of", map[string]any{"egressMode": "BLOCK_ALL"}},
		{"lower-case mode", "is not one of", map[string]any{"egressMode": "deny_all"}},
		{"allowlist without mode", "only allowed with egressMode ALLOW_LIST", map[string]any{"egressAllowlist": []string{"example.com"}}},
		{"allowlist with ALLOW_ALL", "only allowed with egressMode ALLOW_LIST", map[string]any{"egressMode": "ALLOW_ALL", "egressAllowlist": []string{"example.com"}}},
		{"allowlist with DENY_ALL", "only allowed with egressMode ALLOW_LIST", map[string]any{"egressMode": "DENY_ALL", "egressAllowlist": []string{"example.com"}}},
		{"empty allowlist with DENY_ALL", "only allowed with egressMode ALLOW_LIST", map[string]any{"egressMode": "DENY_ALL", "egressAllowlist": []string{}}},
		{"ALLOW_LIST without list", "needs at least one host name", map[string]any{"egressMode": "ALLOW_LIST"}},
		{"ALLOW_LIST empty list", "needs at least one host name", list()},
		{"over the maximum", fmt.Sprintf("at most %d", sandbox.MaxEgressAllowlist), list(many...)},
		{"IPv4 address", "is an IP address", list("example.com", "198.51.100.7")},
		{"IPv6 address", "is an IP address", list("2001:db8::1")},
		{"bracketed IPv6", "is an IP address", list("[2001:db8::1]")},
		{"address range", "is an address range", list("10.0.0.0/8")},
		{"numeric name", "last label is numeric", list("1.2.3.999")},
		{"underscore", "invalid label", list("bad_name.example.com")},
		{"leading hyphen", "invalid label", list("-a.example.com")},
		{"empty label", "invalid label", list("a..example.com")},
		{"single label", "at least two labels", list("localhost")},
		{"wildcard on a TLD", "whole top-level domain", list("*.com")},
		{"inner wildcard", "only wildcard form", list("api.*.example.com")},
		{"bare wildcard", "only wildcard form", list("*")},
		{"empty name", "is empty", list("")},
		{"with a port", "invalid label", list("example.com:443")},
		{"with a scheme", "invalid label", list("https://example.com")},
		{"too long", "longer than 253", list(strings.Repeat("a.", 127) + "com")},
		{"duplicate, other case", "repeats egressAllowlist[0]", list("example.com", "EXAMPLE.com.")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, b.URL())
			msg := apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, tc.body, nil), http.StatusUnprocessableEntity, sandbox.CodeInvalidEgress)
			if !strings.Contains(msg, tc.want) {
				t.Fatalf("message %q does not say %q", msg, tc.want)
			}
		})
	}
	// A wrong JSON type is a malformed request, as for every other field.
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"egressMode": "ALLOW_LIST", "egressAllowlist": "example.com"}, nil), 400, "INVALID_REQUEST")
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"egressMode": 1}, nil), 400, "INVALID_REQUEST")
	if n := len(apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes", tokA, nil, nil))); n != 0 {
		t.Fatalf("refused creates left %d sandboxes", n)
	}

	// Good requests: recorded as given and shown on create, get and list.
	goodList := []string{"example.com", "*.Example.org", "api.example.net.", "xn--bcher-kva.example"}
	for _, body := range []map[string]any{
		{},
		{"egressMode": "ALLOW_ALL"},
		{"egressMode": "DENY_ALL"},
		list(goodList...),
		list(many[:sandbox.MaxEgressAllowlist]...),
	} {
		r := c.Do("POST", "/sandboxes", tokA, body, nil)
		if r.Status != http.StatusCreated {
			t.Fatalf("create %v: %v", body, r)
		}
		v := apitest.DecodeData[apitest.Sandbox](t, r)
		wantMode, _ := body["egressMode"].(string)
		if wantMode == "" {
			wantMode = "ALLOW_ALL"
		}
		wantList, _ := body["egressAllowlist"].([]string)
		got := apitest.DecodeData[apitest.Sandbox](t, c.Do("GET", "/sandboxes/"+v.ID, tokA, nil, nil))
		for _, g := range []apitest.Sandbox{v, got} {
			if g.EgressMode != wantMode || !slices.Equal(g.EgressAllowlist, wantList) {
				t.Fatalf("create %v shows egressMode %q egressAllowlist %q", body, g.EgressMode, g.EgressAllowlist)
			}
		}
	}
}

// TestEgressControlOff: a backend started with egress control off refuses
// every restricted mode with 400 EGRESS_CONTROL_UNAVAILABLE (as upstream
// does for accounts without it) and still creates ALLOW_ALL sandboxes;
// validation comes first.
func TestEgressControlOff(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{EgressControl: testbackend.EgressOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := newClient(t, b.URL())
	for _, body := range []map[string]any{
		{"egressMode": "DENY_ALL"},
		{"egressMode": "ALLOW_LIST", "egressAllowlist": []string{"example.com"}},
	} {
		msg := apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, body, nil), http.StatusBadRequest, sandbox.CodeEgressControlUnavailable)
		if !strings.Contains(msg, "turned off") || !strings.Contains(msg, "ALLOW_ALL") {
			t.Fatalf("message %q should say egress control is turned off and what to use", msg)
		}
	}
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes", tokA, map[string]any{"egressMode": "NONE"}, nil), http.StatusUnprocessableEntity, sandbox.CodeInvalidEgress)
	sb := c.Create(tokA, map[string]any{"egressMode": "ALLOW_ALL"})
	if v := apitest.DecodeData[apitest.Sandbox](t, c.Do("GET", "/sandboxes/"+sb.ID, tokA, nil, nil)); v.EgressMode != "ALLOW_ALL" {
		t.Fatalf("egressMode %q", v.EgressMode)
	}
	if _, err := startBackend(t.TempDir(), testbackend.Config{EgressControl: "maybe"}); err == nil || !strings.Contains(err.Error(), "auto, on or off") {
		t.Fatalf("a bad egress-control setting: %v", err)
	}

	// "auto" on a backend that cannot enforce (no sandbox network) says why;
	// "on" there refuses to start.
	none, err := startBackend(t.TempDir(), testbackend.Config{Network: "none"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { none.Close() })
	msg := apitest.ExpectErr(t, newClient(t, none.URL()).Do("POST", "/sandboxes", tokA, map[string]any{"egressMode": "DENY_ALL"}, nil), http.StatusBadRequest, sandbox.CodeEgressControlUnavailable)
	if !strings.Contains(msg, "no network") {
		t.Fatalf("message %q does not say why", msg)
	}
	if b, err := startBackend(t.TempDir(), testbackend.Config{Network: "none", EgressControl: testbackend.EgressOn}); err == nil {
		b.Close()
		t.Fatal("egress control on, without a sandbox network: the backend started")
	}
}
