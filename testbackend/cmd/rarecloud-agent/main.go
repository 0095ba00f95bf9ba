// Command rarecloud-agent is a sandbox's main process when the backend
// drives it through its attached stdin and stdout and, run as
// "rarecloud-agent --channel SOCKET", through that Unix socket as well
// (see package agent); run as "rarecloud-agent cat PATH LIMIT" it reads
// one file for the file route, and as "rarecloud-agent write PATH" it
// writes its stdin to one.
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
	"time"

	"golang.org/x/sys/unix"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
)

// fileCommand runs "cat PATH LIMIT" or "write PATH" and returns its exit
// code; 2 for arguments of neither.
func fileCommand(args []string) int {
	switch {
	case len(args) == 3 && args[0] == agent.CatArg:
		if limit, ok := agent.CatLimit(args[2]); ok {
			return agent.Cat(args[1], limit, os.Stdout, os.Stderr)
		}
	case len(args) == 2 && args[0] == agent.WriteArg:
		return agent.Write(args[1], os.Stdin, os.Stdout, os.Stderr)
	}
	fmt.Fprintln(os.Stderr, "usage: rarecloud-agent cat PATH LIMIT | write PATH")
	return 2
}

// fileCommandLimit is how long a file command may run: past the backend's
// wait for one (a minute), after which nobody reads its answer.
const fileCommandLimit = 2 * time.Minute

func main() {
	// "cat PATH LIMIT" and "write PATH": the file route's reader
	// (agent.Cat) and writer of its stdin (agent.Write), as a process of
	// their own (in a run-mode sandbox, through the engine's exec).
	// Nothing wraps them in timeout(1), so each ends itself when it
	// outlives the file route's longest wait.
	if len(os.Args) > 1 && (os.Args[1] == agent.CatArg || os.Args[1] == agent.WriteArg) {
		time.AfterFunc(fileCommandLimit, func() {
			fmt.Fprintln(os.Stderr, "rarecloud-agent: the file operation took too long")
			os.Exit(124)
		})
		os.Exit(fileCommand(os.Args[1:]))
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
	// Sandbox code may signal the agent (gVisor does not shield a
	// sandbox's first process as Linux shields a namespace's init): the
	// job-control stops are caught and dropped, not ignored, so the
	// commands the agent starts get them at their default. SIGSTOP cannot
	// be caught; the backend bounds what a stopped agent holds.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
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
