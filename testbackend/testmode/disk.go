package testmode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// Each container is one JSON file in the runtime's directory, named by its
// id and written atomically (a temporary file, synced, renamed over the
// old one), so a crash leaves the old state or the new one, never half.

func (r *Runtime) path(id string) string { return filepath.Join(r.dir, id+".json") }

// load reads every container kept in the directory. A file that does not
// decode is reported, not skipped: its sandbox would end as lost.
func (r *Runtime) load() error {
	if err := store.MkdirNoFollow(r.dir); err != nil {
		return fmt.Errorf("testmode: %w", err)
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return fmt.Errorf("testmode: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		data, err := store.ReadFileNoFollow(filepath.Join(r.dir, name))
		if err != nil {
			return fmt.Errorf("testmode: %w", err)
		}
		b := &box{gone: make(chan struct{})}
		if err := json.Unmarshal(data, b); err != nil || b.ID+".json" != name {
			return fmt.Errorf("testmode: container %s does not decode: %v", name, err)
		}
		r.boxes[b.ID] = b
	}
	return nil
}

// save writes the container as it is now.
func (r *Runtime) save(b *box) error { return r.update(b, func() {}) }

// update changes the container under the runtime's lock and writes it;
// its writes reach the disk in the order of their changes. A container
// removed meanwhile is not written again: ErrNotFound.
func (r *Runtime) update(b *box, change func()) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	r.mu.Lock()
	if r.boxes[b.ID] != b {
		r.mu.Unlock()
		return fmt.Errorf("testmode: container %s: %w", b.ID, container.ErrNotFound)
	}
	change()
	data, err := json.Marshal(b)
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("testmode: encode container %s: %w", b.ID, err)
	}
	return writeFile(r.path(b.ID), data)
}

// drop removes a removed container's file, after any write under way.
func (r *Runtime) drop(b *box) error {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if err := os.Remove(r.path(b.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("testmode: %w", err)
	}
	return nil
}

// writeFile writes a container's file the way the store writes records.
func writeFile(path string, data []byte) error {
	if err := store.WriteFileAtomic(path, data); err != nil {
		return fmt.Errorf("testmode: %w", err)
	}
	return nil
}
