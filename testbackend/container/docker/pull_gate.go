package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// How pulls get to run. A tenant names any public image, and each pull
// costs the host up to DefaultMaxDownloadBytes of download, the engine's
// CPU to unpack it and its disk: without a bound, one account creating
// sandboxes of distinct images (dropping each connection) had the host
// pull all of them at once. So:
//
//   - Concurrent ensures of one reference share one flight (its pull).
//   - A flight downloads only while it holds one of MaxPulls slots; the
//     others wait in line, oldest first. A flight nobody waits for any
//     more (every caller's context ended) leaves the line: it never
//     downloads. One holding a slot runs to its end under PullTimeout, so
//     that the next create of its image finds it.
//   - An account (container.WithPullAccount) has at most one flight it
//     started, waiting or under way; a second reference of it is a
//     *container.PullLaterError at once (429 with Retry-After). An image
//     already present or already being pulled is never refused for it.
//   - A flight starts only while the store has room (storeRoomLocked,
//     image_store.go); otherwise it is refused, at once when that is
//     already so, nothing downloaded.

// DefaultMaxPulls is how many pulls download and load at once.
const DefaultMaxPulls = 2

// accountPullRetry is the Retry-After of an account's second pull.
const accountPullRetry = 5 * time.Second

// pullGate is the pulls' slots and their line; imgMu guards it.
type pullGate struct {
	max       int
	active    int                    // flights holding a slot
	line      []*pullFlight          // flights waiting for one, oldest first
	byAccount map[string]*pullFlight // the flight each account started, until it ends
}

func newPullGate(slots int) *pullGate {
	if slots <= 0 {
		slots = DefaultMaxPulls
	}
	return &pullGate{max: slots, byAccount: map[string]*pullFlight{}}
}

// pullFlight is one pull of a reference that every concurrent EnsureImage
// of that reference waits for. imgMu guards all but done, and err, which
// is set before done is closed.
type pullFlight struct {
	ref, account string // account: who started it, or ""
	waiters      int
	started      bool // it holds a slot
	ended        bool
	done         chan struct{}
	err          error
}

// sharedPull waits for the pull of ref, starting one when none is under
// way or waiting, unless the account or the store refuses it. A caller
// whose ctx ends stops waiting; the flight goes on only if it has started
// or others wait for it.
func (d *Runtime) sharedPull(ctx context.Context, ref string) error {
	d.imgMu.Lock()
	f := d.flights[ref]
	if f == nil {
		account := container.PullAccountOf(ctx)
		if err := d.admitPullLocked(ref, account); err != nil {
			d.imgMu.Unlock()
			return err
		}
		f = &pullFlight{ref: ref, account: account, done: make(chan struct{})}
		d.flights[ref] = f
		if account != "" {
			d.gate.byAccount[account] = f
		}
		d.gate.line = append(d.gate.line, f)
		d.dispatchPullsLocked()
	}
	f.waiters++
	d.imgMu.Unlock()

	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
	}
	d.imgMu.Lock()
	f.waiters--
	started := f.started
	if f.waiters == 0 && !started {
		d.endFlightLocked(f, errAbandoned)
	}
	d.imgMu.Unlock()
	select {
	case <-f.done:
		if f.err != errAbandoned {
			return f.err
		}
	default:
	}
	if !started {
		return &container.ImageRefusedError{Image: ref, Rule: container.RulePull, Msg: fmt.Sprintf(
			"try again shortly: image %q could not be pulled in time, the backend being busy with other pulls (at most %d at once)", ref, d.gate.max)}
	}
	return &container.ImageRefusedError{Image: ref, Rule: container.RulePull, Msg: fmt.Sprintf(
		"image %q could not be pulled in time; it may still be arriving, so try again shortly", ref)}
}

// errAbandoned ends a flight that left the line: no caller sees it.
var errAbandoned = errors.New("the pull was abandoned before it started")

// admitPullLocked refuses a new flight of ref for account: a second one
// of the account's, or one the store has no room for.
func (d *Runtime) admitPullLocked(ref, account string) error {
	if account != "" && d.gate.byAccount[account] != nil {
		return &container.PullLaterError{Image: ref, PerAccount: true, RetryAfter: accountPullRetry, Msg: fmt.Sprintf(
			"retry image %q in %d s: account %s is already pulling another image, and each account pulls one image at a time (images already on the backend, or already being pulled, are not limited)",
			ref, int(accountPullRetry/time.Second), account)}
	}
	return d.storeRoomLocked(ref, account)
}

// dispatchPullsLocked gives free slots to the oldest flights in line,
// refusing those the store has no room for now.
func (d *Runtime) dispatchPullsLocked() {
	for d.gate.active < d.gate.max && len(d.gate.line) > 0 {
		f := d.gate.line[0]
		d.gate.line[0] = nil
		d.gate.line = d.gate.line[1:]
		if err := d.storeRoomLocked(f.ref, f.account); err != nil {
			d.endFlightLocked(f, err)
			continue
		}
		f.started = true
		d.gate.active++
		go d.fly(f)
	}
}

// fly runs a flight that holds a slot, then hands the slot on.
func (d *Runtime) fly(f *pullFlight) {
	err := d.pullImage(f.ref)
	d.imgMu.Lock()
	d.gate.active--
	if p := d.pulled[f.ref]; p != nil && err == nil {
		p.account = f.account // its hold counts against the account's half of the store
	}
	d.endFlightLocked(f, err)
	d.dispatchPullsLocked()
	d.imgMu.Unlock()
}

// endFlightLocked ends f with err: out of the line, the account's slot
// and the flights, and its waiters answered.
func (d *Runtime) endFlightLocked(f *pullFlight, err error) {
	if f.ended {
		return
	}
	f.ended = true
	if i := slices.Index(d.gate.line, f); i >= 0 {
		d.gate.line = slices.Delete(d.gate.line, i, i+1)
	}
	if f.account != "" && d.gate.byAccount[f.account] == f {
		delete(d.gate.byAccount, f.account)
	}
	if d.flights[f.ref] == f {
		delete(d.flights, f.ref)
	}
	f.err = err
	close(f.done)
}
