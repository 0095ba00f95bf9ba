package testmode

import (
	"context"
	"fmt"
	"path"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Files are kept by absolute path, with no file system behind them: no
// directories, no permissions, no size limit of their own. A write is on
// disk (with the container) before it returns. The devices and the
// directories every real sandbox has are refused as a real sandbox
// refuses them (notRegular).

// Paths that are not regular files in every sandbox.
var (
	devices     = map[string]bool{"/dev/null": true, "/dev/zero": true, "/dev/full": true, "/dev/random": true, "/dev/urandom": true, "/dev/tty": true, "/dev/ptmx": true}
	directories = map[string]bool{"/": true, "/dev": true, "/dev/shm": true, "/home": true, "/home/user": true, "/tmp": true}
)

// notRegular refuses a path a real sandbox has as a device or a directory.
func notRegular(p string) error {
	switch c := path.Clean(p); {
	case directories[c]:
		return fmt.Errorf("testmode: %s: %w", p, container.ErrIsADirectory)
	case devices[c]:
		return fmt.Errorf("testmode: %s: %w", p, container.ErrNotRegular)
	}
	return nil
}

// WriteFile keeps content at path, replacing what was there. Nothing is
// copied through an engine, so the pace is not needed.
func (r *Runtime) WriteFile(_ context.Context, id, path, content string, _ container.Pacer) error {
	b, err := r.running(id)
	if err != nil {
		return err
	}
	if err := notRegular(path); err != nil {
		return err
	}
	return r.update(b, func() {
		if b.Files == nil {
			b.Files = map[string]string{}
		}
		b.Files[path] = content
	})
}

// ReadFile returns what was last written at path, without a pace, as
// WriteFile.
func (r *Runtime) ReadFile(_ context.Context, id, path string, limit int, _ container.Pacer) ([]byte, error) {
	b, err := r.running(id)
	if err != nil {
		return nil, err
	}
	if err := notRegular(path); err != nil {
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
