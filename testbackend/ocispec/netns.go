// Package ocispec holds what the sandbox runtime wrapper
// (cmd/rarecloud-runsc) reads and edits in an OCI spec on create: the
// network namespace the backend prepared (netns.go) and the agent channel
// that needs runsc's --host-uds (channel.go). It is kept small: the
// wrapper runs on every create the engine makes.
package ocispec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// NetnsDir is where the backend keeps the sandboxes' network namespaces,
// each a bind-mounted nsfs file named by the id of the container that is to
// join it.
var NetnsDir = "/run/rarecloud/netns"

// boolFlags are runc's global flags that take no value.
var boolFlags = map[string]bool{"debug": true, "systemd-cgroup": true, "help": true, "h": true, "version": true, "v": true}

// CreateCall finds the bundle directory and the container id of a runtime
// "create" call (runc's command line: global flags, the subcommand, its
// flags, the container id last).
func CreateCall(args []string) (bundle, id string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "-") {
			// A global flag; "--flag value" takes the next argument too.
			if !strings.Contains(a, "=") && !boolFlags[strings.TrimLeft(a, "-")] {
				i++
			}
			continue
		}
		if a != "create" {
			return "", "", false // another subcommand
		}
		rest := args[i+1:]
		if len(rest) == 0 {
			return "", "", false
		}
		id = rest[len(rest)-1]
		for j := 0; j < len(rest); j++ {
			switch f := rest[j]; {
			case (f == "--bundle" || f == "-bundle" || f == "-b") && j+1 < len(rest):
				return rest[j+1], id, true
			case strings.HasPrefix(f, "--bundle="):
				return strings.TrimPrefix(f, "--bundle="), id, true
			case strings.HasPrefix(f, "-b="):
				return strings.TrimPrefix(f, "-b="), id, true
			}
		}
		wd, err := os.Getwd()
		return wd, id, err == nil
	}
	return "", "", false
}

// JoinPreparedNetns rewrites the spec at path so that the container joins
// the namespace NetnsDir/id when the backend prepared one for it. Without
// that file the spec is left untouched (a container the engine networks).
func JoinPreparedNetns(path, id string) error {
	if id == "" || strings.ContainsAny(id, "/.") {
		return nil
	}
	ns := filepath.Join(NetnsDir, id)
	if _, err := os.Stat(ns); err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := setNetnsPath(raw, ns)
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	tmp := path + ".rarecloud"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// setNetnsPath sets the path of the spec's network namespace, keeping every
// other field as it was (numbers included: decoded as json.Number).
func setNetnsPath(raw []byte, ns string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return nil, err
	}
	linux, _ := spec["linux"].(map[string]any)
	if linux == nil {
		return nil, fmt.Errorf("spec has no linux section")
	}
	nss, _ := linux["namespaces"].([]any)
	found := false
	for _, n := range nss {
		m, _ := n.(map[string]any)
		if m != nil && m["type"] == "network" {
			if p, _ := m["path"].(string); p != "" && p != ns {
				return nil, fmt.Errorf("the network namespace is already %s", p)
			}
			m["path"] = ns
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("spec has no network namespace to place (host network?)")
	}
	return json.Marshal(spec)
}
