package ocispec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCreateCall(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		bundle, id string
		ok         bool
	}{
		// What containerd's runc shim runs.
		{[]string{"--root", "/run/x/runsc/moby", "--log", "/run/b/log.json", "--log-format", "json", "create", "--bundle", "/run/b", "--pid-file", "/run/b/init.pid", "abc123"}, "/run/b", "abc123", true},
		{[]string{"--systemd-cgroup", "create", "--bundle=/run/c", "id2"}, "/run/c", "id2", true},
		{[]string{"create", "-b", "/run/d", "--console-socket", "/tmp/s", "id3"}, "/run/d", "id3", true},
		// Not a create.
		{[]string{"--root", "/r", "start", "abc123"}, "", "", false},
		{[]string{"--root", "/r", "state", "create"}, "", "", false},
		{[]string{"--root", "/r", "delete", "--force", "abc123"}, "", "", false},
		{[]string{"--version"}, "", "", false},
		{nil, "", "", false},
		// A flag value that looks like the subcommand is not one.
		{[]string{"--log", "create", "start", "x"}, "", "", false},
	} {
		b, id, ok := CreateCall(tc.args)
		if b != tc.bundle || id != tc.id || ok != tc.ok {
			t.Errorf("CreateCall(%q) = %q, %q, %v; want %q, %q, %v", tc.args, b, id, ok, tc.bundle, tc.id, tc.ok)
		}
	}
}

const specJSON = `{"ociVersion":"1.0.2","process":{"user":{"uid":10001,"gid":10001},"rlimits":[{"type":"RLIMIT_NPROC","hard":18446744073709551615,"soft":256}]},
"hostname":"x<y>","linux":{"namespaces":[{"type":"mount"},{"type":"network"},{"type":"pid"}],"resources":{"memory":{"limit":536870912}}}}`

// withNetnsDir points NetnsDir at a temporary directory.
func withNetnsDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	old := NetnsDir
	NetnsDir = dir
	t.Cleanup(func() { NetnsDir = old })
	return dir
}

func TestJoinPreparedNetns(t *testing.T) {
	nsdir := withNetnsDir(t)
	bundle := t.TempDir()
	cfg := filepath.Join(bundle, "config.json")
	if err := os.WriteFile(cfg, []byte(specJSON), 0o600); err != nil {
		t.Fatal(err)
	}

	// No namespace prepared for the container: the spec is left alone.
	if err := JoinPreparedNetns(cfg, "c1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(cfg); string(got) != specJSON {
		t.Fatalf("spec changed without a prepared namespace:\n%s", got)
	}

	// Prepared: the network namespace gets its path, nothing else changes.
	ns := filepath.Join(nsdir, "c1")
	if err := os.WriteFile(ns, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := JoinPreparedNetns(cfg, "c1"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(cfg)
	var spec, want map[string]any
	if err := json.Unmarshal(got, &spec); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(specJSON), &want)
	linux, _ := want["linux"].(map[string]any)
	nss, _ := linux["namespaces"].([]any)
	netNS, ok := nss[1].(map[string]any)
	if !ok {
		t.Fatalf("spec fixture: %v", want)
	}
	netNS["path"] = ns
	if g, w := mustJSON(t, spec), mustJSON(t, want); g != w {
		t.Errorf("rewritten spec\n%s\nwant\n%s", g, w)
	}
	// Integers beyond float64's precision survive.
	if !strings.Contains(string(got), "18446744073709551615") {
		t.Errorf("the rlimit lost its exact value: %s", got)
	}

	// Ids that would name another file are never followed.
	for _, id := range []string{"", "../c1", "c1/..", "."} {
		if err := os.WriteFile(cfg, []byte(specJSON), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := JoinPreparedNetns(cfg, id); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(cfg); string(got) != specJSON {
			t.Errorf("id %q: spec changed", id)
		}
	}
}

func TestSetNetnsPathRefuses(t *testing.T) {
	for name, spec := range map[string]string{
		"host network":  `{"linux":{"namespaces":[{"type":"pid"}]}}`,
		"another netns": `{"linux":{"namespaces":[{"type":"network","path":"/proc/1/ns/net"}]}}`,
		"no linux":      `{}`,
	} {
		if out, err := setNetnsPath([]byte(spec), "/run/rarecloud/netns/x"); err == nil {
			t.Errorf("%s: got %s, want an error", name, out)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
