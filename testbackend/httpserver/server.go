// Package httpserver is the backend's HTTP server and its bounds on
// connections: how long reading a request may take, how long a kept-alive
// connection may idle, how large headers may be, and how many
// connections one client address may hold open. It imports nothing of
// the backend's: the composition root serves the API's handler (package
// api) through it.
package httpserver

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults of the HTTP server's limits (the backend's
// Config.BodyReadTimeout, ConnIdleTimeout, MaxConnsPerAddr).
const (
	// DefaultBodyReadTimeout bounds reading one request, headers and body.
	// The largest body (api.MaxBodyBytes, 8 MiB) takes 60 s at about
	// 140 KB/s.
	DefaultBodyReadTimeout = 60 * time.Second
	// DefaultConnIdleTimeout closes a keep-alive connection without a new
	// request for that long.
	DefaultConnIdleTimeout = 2 * time.Minute
	// DefaultMaxConnsPerAddr bounds the open connections of one client
	// address: room for a few accounts' full use behind one address (a
	// NAT, a CI host; an account past api.DefaultMaxInFlight requests
	// waits in line or gets 429s anyway) while one address cannot hold
	// more than a small share of the process's descriptors.
	DefaultMaxConnsPerAddr = 256
)

// MaxHeaderBytes bounds a request's headers (64 KiB); past it the server
// answers 431.
const MaxHeaderBytes = 64 << 10

// readHeaderTimeout bounds the headers alone (within the body deadline).
const readHeaderTimeout = 10 * time.Second

// New builds the HTTP server with its limits:
//
//   - Reading a request, headers and body, is bounded by bodyRead from its
//     first byte (http.Server.ReadTimeout): a client trickling its body is
//     answered 408 (api.CodeRequestTimeout) and its connection closed. The
//     deadline is lifted once the body has been read (net/http clears it
//     when it starts watching the connection for the client going away),
//     so a long poll (no body) and a 10-minute command (a small body)
//     answer whenever they finish.
//   - Writes have no deadline: an answer may legitimately come after a
//     command's 10 minutes, and a WriteTimeout counts from the request's
//     start. A client that stops reading holds at most its connections,
//     which are bounded per address.
//   - A keep-alive connection without a new request is closed after idle.
//   - Headers are at most MaxHeaderBytes.
func New(h http.Handler, bodyRead, idle time.Duration) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(readHeaderTimeout, bodyRead),
		ReadTimeout:       bodyRead,
		IdleTimeout:       idle,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}

// limitListener bounds the open connections per client IP address.
// A connection past the bound is closed as soon as it is accepted, before
// a byte of it is read: answering it (a 503 envelope) would mean reading
// its request, which is the very cost the bound is there to cap, so the
// client sees the connection closed. Its earlier connections are
// untouched. A local client, loopback, counts as one address like any.
type limitListener struct {
	net.Listener
	max int
	log *slog.Logger

	mu       sync.Mutex
	open     map[string]int
	lastWarn time.Time // of the last refusal logged
}

// LimitConns bounds ln's open connections per client IP address to
// bound (limitListener); a negative bound is none, and ln is returned.
func LimitConns(ln net.Listener, bound int, log *slog.Logger) net.Listener {
	if bound < 0 {
		return ln
	}
	return &limitListener{Listener: ln, max: bound, log: log, open: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := hostOf(c.RemoteAddr())
		l.mu.Lock()
		n := l.open[addr]
		if n >= l.max {
			warn := time.Since(l.lastWarn) >= time.Minute
			if warn {
				l.lastWarn = time.Now()
			}
			l.mu.Unlock()
			_ = c.Close()
			if warn {
				l.log.Warn("refusing connections past the bound per client address (--max-conns-per-addr); logged at most once a minute", "addr", addr, "bound", l.max)
			}
			continue
		}
		l.open[addr] = n + 1
		l.mu.Unlock()
		return &limitConn{Conn: c, release: sync.OnceFunc(func() { l.release(addr) })}, nil
	}
}

func (l *limitListener) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[addr]--; l.open[addr] <= 0 {
		delete(l.open, addr)
	}
}

func hostOf(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// limitConn gives its place back when closed (once, however often Close
// is called).
type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
