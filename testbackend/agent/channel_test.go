package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestChannel: an agent dials the backend's socket, serves requests on
// it, and its pings report the channel; a socket nobody listens on
// leaves it without one, and says why.
func TestChannel(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	if conn, status := DialChannel(sock); conn != nil || !strings.HasPrefix(status, "not connected: ") {
		t.Fatalf("dial with nobody listening: %v, %q", conn, status)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, status := DialChannel(sock)
	if conn == nil || status != ChannelConnected {
		t.Fatalf("dial: %v, %q", conn, status)
	}
	go func() { _ = ServeChannel(context.Background(), conn, conn, status); conn.Close() }()
	backend, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	br := bufio.NewReader(backend)
	enc := json.NewEncoder(backend)
	for _, req := range []Request{{ID: 7, Ping: true}, {ID: 8, Argv: []string{"echo", "over the socket"}}} {
		if err := enc.Encode(req); err != nil {
			t.Fatal(err)
		}
		res, _, err := ReadFrame(br, 64<<10, func(Response) (int, bool) { return 1 << 20, true })
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case req.Ping && (res.ID != 7 || res.Protocol != Protocol || res.Channel != ChannelConnected):
			t.Fatalf("ping answered %+v", res)
		case !req.Ping && (res.ID != 8 || string(res.Stdout) != "over the socket\n" || res.ExitCode == nil || *res.ExitCode != 0):
			t.Fatalf("echo answered %+v, stdout %q", res, res.Stdout)
		}
	}
}
