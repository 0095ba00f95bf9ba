// Package testbackend wires the RareCloud API v1 test backend together:
// store, runtime, sandbox lifecycle and HTTP API. The command in
// cmd/rarecloud-testbackend and the provider's acceptance tests both start
// it through New.
package testbackend

import (
	"context"
	"errors"
	"time"
)

// Token is one API token the backend accepts.
type Token struct {
	Token   string   `json:"token"`
	Account string   `json:"account"`
	Scopes  []string `json:"scopes"`
}

// Config configures a backend. Zero values take the documented defaults.
type Config struct {
	Listen     string        // default 127.0.0.1:8080; "127.0.0.1:0" picks a free port
	DataDir    string        // where records live; default under the user's cache dir
	TokensFile string        // JSON {"tokens":[...]}; ignored when Tokens is set
	Tokens     []Token       // in-process callers pass tokens directly
	Mode       string        // "real" (default) or "test"
	DockerHost string        // default $DOCKER_HOST, else the engine make setup started
	Runtime    string        // OCI runtime, default "runsc"
	Pull       string        // "missing" (default) or "never"
	Network    string        // Docker network for sandboxes; default the one make setup made, "none" for no network
	Retention  time.Duration // how long exited run-mode records stay readable; default 24h
}

// Backend is a running test backend.
type Backend struct {
	url string
}

// New starts a backend: it opens the store, connects to the engine,
// reconciles, and starts serving. Close stops it.
func New(ctx context.Context, cfg Config) (*Backend, error) {
	return nil, errors.New("testbackend: not implemented yet")
}

// URL is the API base, for example http://127.0.0.1:8080/v1.
func (b *Backend) URL() string { return b.url }

// DevToken is the development token created when no tokens were configured.
func (b *Backend) DevToken() string { return "" }

// Close stops serving and releases the engine. Sandboxes stay, as records
// and containers, for the next start to pick up.
func (b *Backend) Close() error { return nil }
