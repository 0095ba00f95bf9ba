package sandbox

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// File reads and writes take turns within each account. Every byte of a
// read (up to MaxReadFileBytes) or a write passes through the sandbox's
// agent, the engine's attach stream and the backend: host CPU that no
// sandbox limit counts, and the more of one account's transfers run at
// once, the longer another account's commands wait for a CPU (measured
// in cmd/rarecloud-bench/results/README.md#hostile-neighbour). While more
// than one account has live sandboxes, one account runs at most
// Config.TransferShare of them at once and the rest wait in its line, for
// at most Config.TransferWait, then answer 429 with Retry-After; other
// accounts' transfers do not wait for them. And their bytes move at most
// Config.TransferRate a second for the account, read from the engine no
// faster, so the agent, the engine and the backend copy them no faster
// either: one transfer at a time back to back would otherwise keep a
// core busy outside any quota. An account alone runs as many at once as
// it sends, at full speed. A running run-mode program's logs are a
// transfer too: the engine reads its whole log (up to the log driver's
// size) for each read of the tail. Commands are not in line or paced: they may
// run for minutes, their output is at most MaxExecOutput a stream, and a
// paced answer would read as a timeout.

// DefaultTransferShare is how many file reads and writes one account runs
// at once while other accounts have live sandboxes.
const DefaultTransferShare = 1

// DefaultTransferWait is how long a file read or write waits in its
// account's line before the 429: a few 8 MB reads' time on a busy host.
const DefaultTransferWait = 3 * time.Second

// DefaultTransferRate is how many bytes a second one account's file
// transfers move while other accounts have live sandboxes: an 8 MB read
// in about two seconds.
const DefaultTransferRate = 4 << 20

// MinTransferRate is the least TransferRate: a paced answer holds the
// other answers of its sandbox's agent, and at this rate the largest
// (MaxReadFileBytes) takes less than the grace a command's answer has
// past its timeout.
const MinTransferRate = 2 << 20

// TransferBurst is how many bytes an account's transfers move at once
// before the pace holds them. (A burst of 128 KiB did not move the
// hostile-neighbour row measurably: results/README.md.)
const TransferBurst = 1 << 20

// transferPace is account's pace for a file transfer: Config.TransferRate
// for all of its transfers together while other accounts have live
// sandboxes, none while it is alone.
func (m *Manager) transferPace(account string) container.Pacer {
	return contendedPace{m: m, lim: m.paces.For(account)}
}

type contendedPace struct {
	m   *Manager
	lim *rate.Limiter
}

func (p contendedPace) WaitN(ctx context.Context, n int) error {
	if !p.m.contended() {
		return nil
	}
	return p.lim.WaitN(ctx, n)
}

// maxTransfers is the turn queue's slots for every account together: so
// many that only an account's share (and its limit of requests in
// flight) bounds its transfers.
const maxTransfers = 1 << 20

// transferTurn waits for account's turn to move a file in or out of
// sandbox id; release ends it. The wait ends with the request, or after
// Config.TransferWait with a 429.
func (m *Manager) transferTurn(ctx context.Context, account, id string) (release func(), err error) {
	wait, cancel := context.WithTimeout(ctx, m.cfg.TransferWait)
	defer cancel()
	release, err = m.transfers.acquire(wait, account)
	switch {
	case err == nil:
		return release, nil
	case ctx.Err() == nil:
		return nil, &Error{Code: CodeTooManyRequests, RetryAfter: 1, Message: fmt.Sprintf(
			"the account's other transfers (file reads and writes, log reads) kept this one for sandbox %s waiting for %s: while other accounts are on the host, an account runs at most %d at a time; retry after a second",
			id, m.cfg.TransferWait, m.cfg.TransferShare)}
	default:
		return nil, errorf(CodeServiceUnavailable, "the request for sandbox %s ended while it waited for its account's turn to move a file or read logs; send it again", id)
	}
}
