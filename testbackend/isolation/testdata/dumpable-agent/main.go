// Command dumpable-agent is the sandbox agent without its
// PR_SET_DUMPABLE protection, as agents were before it: sandbox code can
// write into its stdout. Tests use it to prove that the backend bounds and
// refuses what comes out of an agent even when the agent is reachable.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
)

func main() {
	agent.Reap()
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		if err := agent.Serve(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "dumpable-agent:", err)
		}
	}()
	<-stop
}
