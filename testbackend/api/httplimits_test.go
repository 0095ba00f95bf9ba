package api_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/httpserver"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// The HTTP server's own limits (package httpserver), over real TCP:
// what a client that trickles, idles or opens too many connections gets,
// and, as controls, that a long poll and a long command outlast the body
// deadline. Every wait is for an event, bounded by eventBound, which says
// nothing about how fast the machine is: only that it happens at all.
const eventBound = 30 * time.Second

// limitsBackend is a test-mode backend with cfg's limits; it returns the
// backend's host:port.
func limitsBackend(t *testing.T, cfg testbackend.Config) (string, *client) {
	t.Helper()
	cfg.Mode = "test"
	b, err := startBackend(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	u, err := url.Parse(b.URL())
	if err != nil {
		t.Fatal(err)
	}
	return u.Host, newClient(t, b.URL())
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// healthOn sends GET /v1/health on conn (kept alive) and reads the answer.
func healthOn(conn net.Conn, br *bufio.Reader) (*http.Response, error) {
	if err := conn.SetDeadline(time.Now().Add(eventBound)); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(conn, "GET /v1/health HTTP/1.1\r\nHost: backend\r\n\r\n"); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, err
}

// closedByServer waits (at most eventBound) for the server to close conn:
// a read that ends in EOF or a reset, not in our own deadline.
func closedByServer(conn net.Conn, br *bufio.Reader) error {
	if err := conn.SetReadDeadline(time.Now().Add(eventBound)); err != nil {
		return err
	}
	_, err := br.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		return errors.New("the server sent more bytes instead of closing")
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("the server kept the connection open for %s", eventBound)
	}
	return nil // io.EOF, ECONNRESET: closed
}

// TestBodyReadTimeout: a client that sends its headers, then trickles its
// body a byte a second, is answered 408 REQUEST_TIMEOUT once the body
// deadline has passed, and its connection is closed, instead of holding
// it for as long as it keeps trickling.
func TestBodyReadTimeout(t *testing.T) {
	t.Parallel()
	addr, _ := limitsBackend(t, testbackend.Config{BodyReadTimeout: time.Second})
	start := time.Now() // before the server starts reading, so before its deadline starts
	conn := dial(t, addr)
	head := "POST /v1/sandboxes HTTP/1.1\r\nHost: backend\r\nAuthorization: Bearer " + tokA +
		"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := io.WriteString(conn, " "); err != nil {
					return
				}
			}
		}
	}()
	br := bufio.NewReader(conn)
	if err := conn.SetReadDeadline(time.Now().Add(eventBound)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("a body trickled a byte a second got no answer in %s: %v", time.Since(start).Round(time.Second), err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var env apitest.Envelope
	if err := json.Unmarshal(data, &env); err != nil || resp.StatusCode != http.StatusRequestTimeout || env.Error == nil || env.Error.Code != "REQUEST_TIMEOUT" {
		t.Fatalf("want 408 REQUEST_TIMEOUT, got %d %s", resp.StatusCode, data)
	}
	if time.Since(start) < time.Second {
		t.Errorf("answered after %s, before the 1 s body deadline", time.Since(start))
	}
	if err := closedByServer(conn, br); err != nil {
		t.Fatalf("after the 408: %v", err)
	}
}

// TestIdleConnectionClosed: a keep-alive connection that sends nothing
// after its request is closed by the server once the idle timeout passes.
func TestIdleConnectionClosed(t *testing.T) {
	t.Parallel()
	addr, _ := limitsBackend(t, testbackend.Config{ConnIdleTimeout: time.Second})
	conn := dial(t, addr)
	br := bufio.NewReader(conn)
	resp, err := healthOn(conn, br)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("health on a kept-alive connection: %v, %v", resp, err)
	}
	if err := closedByServer(conn, br); err != nil {
		t.Fatalf("idle connection: %v", err)
	}
}

// TestHeaderBytesBound: a request whose headers pass the bound is
// answered 431 instead of being read into memory.
func TestHeaderBytesBound(t *testing.T) {
	t.Parallel()
	addr, _ := limitsBackend(t, testbackend.Config{})
	conn := dial(t, addr)
	if err := conn.SetDeadline(time.Now().Add(eventBound)); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("a", 2*httpserver.MaxHeaderBytes)
	go io.WriteString(conn, "GET /v1/health HTTP/1.1\r\nHost: backend\r\nX-Pad: "+pad+"\r\n\r\n") //nolint:errcheck // the server may close before it is all sent
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("headers of %d bytes: want 431, got %d", len(pad), resp.StatusCode)
	}
}

// TestConnectionsPerAddressBound: past the bound of open connections from
// one address, a new one is closed at once, with no answer, while the
// earlier ones keep working; once one of them closes, a new one is served.
func TestConnectionsPerAddressBound(t *testing.T) {
	t.Parallel()
	const bound = 3
	addr, _ := limitsBackend(t, testbackend.Config{MaxConnsPerAddr: bound})
	conns := make([]net.Conn, bound)
	readers := make([]*bufio.Reader, bound)
	for i := range conns {
		conns[i] = dial(t, addr)
		readers[i] = bufio.NewReader(conns[i])
		if resp, err := healthOn(conns[i], readers[i]); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d of %d: %v, %v", i+1, bound, resp, err)
		}
	}
	extra := dial(t, addr)
	if resp, err := healthOn(extra, bufio.NewReader(extra)); err == nil {
		t.Fatalf("connection %d from one address (bound %d) was served: %d", bound+1, bound, resp.StatusCode)
	} else {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d from one address was held open without an answer for %s instead of closed", bound+1, eventBound)
		}
	}
	for i := range conns {
		if resp, err := healthOn(conns[i], readers[i]); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d after the refusal: %v, %v", i+1, resp, err)
		}
	}
	// A closed connection frees its place (once the server has seen it go).
	conns[0].Close()
	eventually(t, eventBound, func() error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		resp, err := healthOn(c, bufio.NewReader(c))
		if err != nil {
			return fmt.Errorf("a new connection after one closed: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("a new connection after one closed: %d", resp.StatusCode)
		}
		return nil
	})
}

// TestLongPollOutlastsBodyDeadline: the body deadline bounds reading a
// request, not answering it: a long poll longer than it answers normally.
func TestLongPollOutlastsBodyDeadline(t *testing.T) {
	t.Parallel()
	_, c := limitsBackend(t, testbackend.Config{BodyReadTimeout: time.Second})
	sb := c.Create(tokA, map[string]any{})
	r := c.Do("GET", "/sandboxes/"+sb.ID+"?waitFor=exited&timeoutMs=3000", tokA, nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("long poll of 3 s with a 1 s body deadline: %v", r)
	}
	if got := apitest.DecodeData[apitest.Sandbox](t, r); got.Status != "running" {
		t.Fatalf("long poll answered status %s, want running", got.Status)
	}
	if r.Elapsed < 3*time.Second {
		t.Fatalf("the long poll answered after %s, before its 3 s", r.Elapsed)
	}
}

// TestLongCommandOutlastsBodyDeadline: a command that runs longer than the
// body deadline completes with its output (real gVisor: test mode runs no
// commands).
func TestLongCommandOutlastsBodyDeadline(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{BodyReadTimeout: time.Second, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c := newClient(t, b.URL())
	sb := c.Running(tokA, map[string]any{})
	res := c.Command(tokA, sb.ID, "sleep 3; echo done", 60000)
	if exitCode(t, res) != 0 || strings.TrimSpace(res.Stdout) != "done" {
		t.Fatalf("a 3 s command with a 1 s body deadline: %+v", res)
	}
}
