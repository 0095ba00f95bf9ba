package testmode

import (
	"maps"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Adopt keeps a running container, with these files, for a live sandbox
// whose container this runtime does not have: one recorded before the
// test mode had a runtime (its record kept its files), or by a real-mode
// backend on the same data directory (the test mode leaves those running
// too). c.ID may be empty (a new id is chosen). When a container with c's
// id or name is there already, nothing changes.
func (r *Runtime) Adopt(c container.Container, files map[string]string) error {
	if c.ID == "" {
		c.ID = newID()
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = time.Now().UTC()
	}
	b := &box{ID: c.ID, Name: c.Name, Labels: maps.Clone(c.Labels), CreatedAt: c.CreatedAt, Files: maps.Clone(files), gone: make(chan struct{})}
	r.mu.Lock()
	for id, o := range r.boxes {
		if id == c.ID || o.Name == c.Name {
			r.mu.Unlock()
			return nil
		}
	}
	r.boxes[b.ID] = b
	r.mu.Unlock()
	return r.save(b)
}
