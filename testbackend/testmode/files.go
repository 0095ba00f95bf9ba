package testmode

import (
	"context"
	"fmt"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Files are kept by absolute path, with no file system behind them: no
// directories, no permissions, no size limit of their own. A write is on
// disk (with the container) before it returns.

// WriteFile keeps content at path, replacing what was there.
func (r *Runtime) WriteFile(_ context.Context, id, path, content string) error {
	b, err := r.running(id)
	if err != nil {
		return err
	}
	return r.update(b, func() {
		if b.Files == nil {
			b.Files = map[string]string{}
		}
		b.Files[path] = content
	})
}

// ReadFile returns what was last written at path.
func (r *Runtime) ReadFile(_ context.Context, id, path string, limit int) ([]byte, error) {
	b, err := r.running(id)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	content, ok := b.Files[path]
	r.mu.Unlock()
	switch {
	case !ok:
		return nil, fmt.Errorf("testmode: %s: %w", path, container.ErrFileNotFound)
	case len(content) > limit:
		return nil, fmt.Errorf("testmode: %s: %w", path, container.ErrFileTooLarge)
	}
	return []byte(content), nil
}
