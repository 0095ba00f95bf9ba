package agent

import (
	"net"
	"time"
)

// The channel is a Unix socket the backend listens on for one agent, in a
// directory it mounts into the sandbox read-only: answers that go through
// it skip the engine's attach stream (the shim's and the engine's copies),
// which under load is most of a command's round trip. The agent connects
// once, as it starts, before any sandbox code can run; the backend accepts
// that one connection and removes the socket. The attached stdin and
// stdout stay served either way: they are how the backend learns whether
// the agent connected (Response.Channel), and all it has after a restart.
const (
	// ChannelFlag, followed by the socket's path in the sandbox, are the
	// agent's arguments when the backend gives it a channel.
	ChannelFlag = "--channel"
	// ChannelConnected is Response.Channel when the agent is connected.
	ChannelConnected = "connected"
	// channelDialTimeout bounds the connect: the backend listens before
	// the sandbox starts, so it answers at once or never.
	channelDialTimeout = 10 * time.Second
)

// DialChannel connects to the backend's socket at path. It returns the
// connection and ChannelConnected, or nil and why not.
func DialChannel(path string) (net.Conn, string) {
	conn, err := net.DialTimeout("unix", path, channelDialTimeout)
	if err != nil {
		return nil, "not connected: " + err.Error()
	}
	return conn, ChannelConnected
}
