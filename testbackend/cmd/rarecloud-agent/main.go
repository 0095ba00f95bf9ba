// Command rarecloud-agent is a sandbox's main process when the backend
// drives it through its attached stdin and stdout (see package agent).
// It does not exit when its input ends: stdin stays open across attaches,
// and a backend that restarts attaches again.
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
			fmt.Fprintln(os.Stderr, "rarecloud-agent:", err)
		}
	}()
	<-stop
}
