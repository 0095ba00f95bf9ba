// Command rarecloud-agent is a sandbox's main process when the backend
// drives it through its attached stdin and stdout and, run as
// "rarecloud-agent --channel SOCKET", through that Unix socket as well
// (see package agent); run as "rarecloud-agent cat PATH" it reads one file
// for the file route.
// It does not exit when its input ends: stdin stays open across attaches,
// and a backend that restarts attaches again.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
)

func main() {
	// "cat PATH": the file route's reader (agent.Cat), a process of its
	// own that the backend's read script runs.
	if len(os.Args) == 3 && os.Args[1] == agent.CatArg {
		os.Exit(agent.Cat(os.Args[2], os.Stdout, os.Stderr))
	}
	// Sandbox code runs as the same user: without this it could open
	// /proc/1/fd/0 and /proc/1/fd/1 and write into, or read from, the
	// channel between the backend and the agent. A process that is not
	// dumpable has its /proc entries owned by root and cannot be traced.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "rarecloud-agent: PR_SET_DUMPABLE:", err)
		os.Exit(1)
	}
	agent.Reap()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	// The channel is dialled before stdin is read: when the backend's
	// ping over stdin is answered, the connect has been made or failed.
	channel := ""
	if len(os.Args) == 3 && os.Args[1] == agent.ChannelFlag {
		var conn net.Conn
		conn, channel = agent.DialChannel(os.Args[2])
		if conn != nil {
			go func() {
				_ = agent.ServeChannel(context.Background(), conn, conn, channel)
				_ = conn.Close()
			}()
		}
	}
	go func() {
		if err := agent.ServeChannel(context.Background(), os.Stdin, os.Stdout, channel); err != nil {
			fmt.Fprintln(os.Stderr, "rarecloud-agent:", err)
		}
	}()
	<-stop
}
