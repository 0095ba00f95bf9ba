// Package hostnet is the host's sandbox network as make setup made it: its
// description in File (one type, read by every part of the backend and
// written by setup through cmd/rarecloud-netfile), and the checks that the
// host's firewall holds it closed (firewall.go), where iptables output is
// read and parsed.
package hostnet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// File is where make setup describes the sandbox network it made.
const File = "/etc/rarecloud/network.json"

// Network is File's content.
type Network struct {
	// Network is the engine's name of the sandbox network, Bridge its
	// interface on the host.
	Network string `json:"network"`
	Bridge  string `json:"bridge"`
	// Subnet holds every sandbox address; Gateway is the host's address
	// on it; IPAMRange the part the engine's own allocator hands out (the
	// backend leases the rest itself, container/netwire).
	Subnet    string `json:"subnet"`
	Gateway   string `json:"gateway"`
	IPAMRange string `json:"ipam_range"`
	// Netns says setup installed the runtime wrapper that lets the backend
	// wire sandboxes into namespaces of its own.
	Netns bool `json:"netns"`
	// DNS is the sandboxes' DNS forwarder on the gateway.
	DNS string `json:"dns"`
	MTU int    `json:"mtu"`
	// Blocked are the ranges the firewall refuses to sandboxes.
	Blocked []string `json:"blocked"`
	// Engine is the engine setup started, which runs the wrapper.
	Engine string `json:"engine"`
}

// Load reads the description at path; ok is false when there is none.
func Load(path string) (n Network, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return n, false, nil
	}
	if err != nil {
		return n, false, err
	}
	if err := json.Unmarshal(data, &n); err != nil {
		return n, false, fmt.Errorf("%s: %w", path, err)
	}
	return n, true, nil
}

// Encode is the description as setup writes it.
func (n Network) Encode() []byte {
	if n.Blocked == nil {
		n.Blocked = []string{}
	}
	data, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		panic(err) // strings, a bool and an int: cannot fail
	}
	return append(data, '\n')
}

// Write puts the description at path (atomically: a temporary file in the
// same directory, then a rename), unless path holds it already. It
// reports whether the file changed.
func (n Network) Write(path string) (changed bool, err error) {
	data := n.Encode()
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".network-*.json")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	return true, os.Rename(tmp.Name(), path)
}
