package ocispec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestWantsChannel: the wrapper lets gVisor reach host sockets only for a
// spec that mounts a directory under ChannelDir at ChannelTarget, and for
// no spec that mounts anything else there or from there.
func TestWantsChannel(t *testing.T) {
	type mnt struct {
		Destination string `json:"destination"`
		Source      string `json:"source"`
		Type        string `json:"type"`
	}
	own := filepath.Join(ChannelDir, "c-123")
	for _, tc := range []struct {
		name   string
		mounts []mnt
		want   bool
	}{
		{"the backend's channel", []mnt{{"/etc/hosts", "/var/lib/x/hosts", "bind"}, {ChannelTarget, own, "bind"}}, true},
		{"the target spelled with a slash", []mnt{{ChannelTarget + "/", own, "bind"}}, true},
		{"no mounts", nil, false},
		{"other mounts only", []mnt{{"/etc/hosts", "/var/lib/x/hosts", "bind"}}, false},
		{"another directory at the target", []mnt{{ChannelTarget, "/run/docker.sock.d", "bind"}}, false},
		{"the channel directory itself", []mnt{{ChannelTarget, ChannelDir, "bind"}}, false},
		{"a name that only starts like it", []mnt{{ChannelTarget, ChannelDir + "-x/c-1", "bind"}}, false},
		{"a channel's directory elsewhere too", []mnt{{ChannelTarget, own, "bind"}, {"/mnt", filepath.Join(ChannelDir, "c-9"), "bind"}}, false},
		{"a second mount at the target", []mnt{{ChannelTarget, own, "bind"}, {ChannelTarget, "/var/run", "bind"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(map[string]any{"ociVersion": "1.0.2", "mounts": tc.mounts})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "config.json")
			if err := os.WriteFile(path, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := WantsChannel(path)
			if err != nil || got != tc.want {
				t.Fatalf("WantsChannel = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := WantsChannel(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("a spec that cannot be read was taken as one without a channel")
	}
}
