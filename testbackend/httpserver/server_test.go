package httpserver

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// The bounds over real TCP, through the API (408, 431, idle, long polls
// and commands that outlast the body deadline), are api/httplimits_test.go's;
// these are the server's parts on their own.

// TestNewSetsTheLimits: the server reads a request within bodyRead (its
// headers within the shorter of that and readHeaderTimeout), idles a
// connection for idle, bounds headers and has no write deadline.
func TestNewSetsTheLimits(t *testing.T) {
	t.Parallel()
	s := New(http.NotFoundHandler(), time.Minute, 2*time.Minute)
	if s.ReadTimeout != time.Minute || s.ReadHeaderTimeout != readHeaderTimeout || s.IdleTimeout != 2*time.Minute || s.MaxHeaderBytes != MaxHeaderBytes || s.WriteTimeout != 0 {
		t.Fatalf("server limits: %+v", s)
	}
	if s := New(http.NotFoundHandler(), time.Second, time.Second); s.ReadHeaderTimeout != time.Second {
		t.Fatalf("a body deadline shorter than the headers': headers within %s", s.ReadHeaderTimeout)
	}
}

// TestLimitConnsPerAddress: past the bound, a connection from the same
// address is closed as soon as it is accepted, never handed on; closing
// an accepted one frees its place.
func TestLimitConnsPerAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lim := LimitConns(ln, 1, slog.New(slog.DiscardHandler))
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := lim.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	held := <-accepted

	refused := dial()
	if err := refused.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := refused.Read(b[:]); err == nil {
		t.Fatal("a connection past the bound was not closed")
	} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a connection past the bound was held open instead of closed")
	}
	select {
	case c := <-accepted:
		t.Fatalf("a connection past the bound was accepted: %v", c.RemoteAddr())
	case <-time.After(100 * time.Millisecond):
	}

	held.Close()
	dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("no connection accepted after the one held closed")
	}
}

// TestLimitConnsNegativeIsNoBound: a negative bound leaves the listener
// as it is.
func TestLimitConnsNegativeIsNoBound(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := LimitConns(ln, -1, nil); got != ln {
		t.Fatalf("a negative bound wrapped the listener: %T", got)
	}
}
