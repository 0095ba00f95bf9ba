package api

import (
	"context"
	"io"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/accountrate"
)

// The rest of a body refused for an over-long number is read and dropped,
// so that a client still sending it reads the 422 instead of a reset
// connection. Reading it costs the backend's CPU and the kernel's, and a
// client that sends the next one as soon as it is answered made the
// backend read gigabytes a minute beside another account's commands
// (cmd/rarecloud-bench/results/README.md#hostile-neighbour). So what each
// account's refused bodies leave is dropped at DrainRate, shared by all
// of its requests: the client pays for an over-long body in time, not the
// host in CPU, and other accounts' drains do not wait for it.

// DrainRate is how many bytes a second of an account's refused bodies
// are read and dropped, drainBurst how many at once.
const (
	DrainRate  = 16 << 20
	drainBurst = 1 << 20
)

// drains holds each account's drain rate.
type drains struct{ by *accountrate.Limiters }

func newDrains(bytesPerSecond int) *drains {
	return &drains{by: accountrate.New(bytesPerSecond, drainBurst)}
}

// drain reads r to its end at account's rate; it stops early when ctx
// ends or r fails (the body read timeout bounds a trickle).
func (d *drains) drain(ctx context.Context, account string, r io.Reader) {
	_, _ = io.Copy(io.Discard, container.PacedReader(ctx, r, d.by.For(account)))
}
