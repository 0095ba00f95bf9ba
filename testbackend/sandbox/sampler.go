package sandbox

import (
	"sync"
	"time"
)

// A sampler holds the last reading of something outside the manager that
// an admission check needs (a file system's free space, the addresses
// leased on the sandbox network), read off the manager's lock: the check
// under it reads the last sample (at most maxAge old, or older while the
// reading is slow to answer) and starts the next one in the background,
// so a read that hangs holds up no create and no other sandbox.
type sampler struct {
	read   func() (int64, error)
	maxAge time.Duration
	// failed is told of a reading that fails after one that did not (or
	// the first): the check is off until one succeeds again.
	failed func(error)

	mu         sync.Mutex
	value      int64
	err        error
	at         time.Time
	refreshing bool
}

func newSampler(read func() (int64, error), maxAge time.Duration, failed func(error)) *sampler {
	s := &sampler{read: read, maxAge: maxAge, failed: failed}
	s.refresh() // the first sample, before any check
	return s
}

func (s *sampler) refresh() {
	v, err := s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && s.err == nil && s.failed != nil {
		s.failed(err)
	}
	s.value, s.err, s.at, s.refreshing = v, err, time.Now(), false
}

// sample is the last sample, ok false when it could not be read; one
// older than maxAge starts the next.
func (s *sampler) sample() (v int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.refreshing && time.Since(s.at) >= s.maxAge {
		s.refreshing = true
		go s.refresh()
	}
	return s.value, s.err == nil
}
