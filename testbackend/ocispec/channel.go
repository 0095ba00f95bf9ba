package ocispec

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// The agent's channel (package agent): the backend listens on a socket in
// a directory of its own under ChannelDir and mounts that directory at
// ChannelTarget in the sandbox. gVisor connects to a host socket only with
// --host-uds=open, which the wrapper passes for the containers whose spec
// mounts such a directory there, and for no other.
var ChannelDir = "/run/rarecloud/agent-channels"

// ChannelTarget is where a sandbox sees its channel's directory.
const ChannelTarget = "/.rarecloud-channel"

// HostUDSFlag is the runsc flag that lets a sandbox connect to a host
// socket mounted into it.
const HostUDSFlag = "--host-uds=open"

// WantsChannel reports whether the spec at path mounts a directory under
// ChannelDir at ChannelTarget, and nothing else from ChannelDir anywhere.
func WantsChannel(path string) (bool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var spec struct {
		Mounts []struct {
			Destination string `json:"destination"`
			Source      string `json:"source"`
		} `json:"mounts"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		return false, err
	}
	want := false
	for _, m := range spec.Mounts {
		inDir := underDir(m.Source, ChannelDir)
		onTarget := filepath.Clean(m.Destination) == ChannelTarget
		switch {
		case inDir && onTarget:
			want = true
		case inDir || onTarget:
			return false, nil // not the backend's
		}
	}
	return want, nil
}

// underDir reports whether p is a directory strictly below dir.
func underDir(p, dir string) bool {
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	return strings.HasPrefix(p, dir+string(filepath.Separator))
}
