package client

import (
	"context"
	"sync/atomic"
)

// CallInfo collects facts about the answers of the calls made with a
// context from WithCallInfo.
type CallInfo struct {
	// Mocked is true once any answer carried "mocked": true (test mode).
	Mocked atomic.Bool
	// Replayed is true once an answer carried Idempotent-Replayed: true.
	Replayed atomic.Bool
	// Attempts counts the HTTP requests sent.
	Attempts atomic.Int64
}

type callInfoKey struct{}

// WithCallInfo returns a context whose calls record into the returned CallInfo.
func WithCallInfo(ctx context.Context) (context.Context, *CallInfo) {
	info := &CallInfo{}
	return context.WithValue(ctx, callInfoKey{}, info), info
}

func callInfo(ctx context.Context) *CallInfo {
	info, _ := ctx.Value(callInfoKey{}).(*CallInfo)
	return info
}
