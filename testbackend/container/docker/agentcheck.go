package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	osexec "os/exec"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
)

// The agent binary is installed beside the backend (make setup), not
// built into it: a backend of a newer tree than the installed agent (a
// pull without make setup), or an older one, would put an agent that
// speaks another protocol into every sandbox, and each file operation it
// does not know would fail as a 500 on a tenant's request. So a runtime
// asks the binary which protocol it speaks before it uses it, and a
// backend whose agent does not speak its own does not start.

// agentCheckTimeout bounds the question: the binary answers a ping at
// once.
const agentCheckTimeout = 10 * time.Second

// ErrAgentProtocol: the agent binary speaks another protocol than this
// backend, or none.
var ErrAgentProtocol = errors.New("the sandbox agent does not speak this backend's protocol")

// checkAgent runs the agent binary at path on the host, sends it a ping on
// its stdin, as a backend does over an attach, and reads the protocol its
// answer names. Every version of the agent answers a ping; none exits when
// its stdin ends, so the process is killed once it has answered.
func checkAgent(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, agentCheckTimeout)
	defer cancel()
	cmd := osexec.CommandContext(ctx, path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("runtime: %w: %s does not run here (%v); make setup installs the agent of this tree", ErrAgentProtocol, path, err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	ping, err := json.Marshal(agent.Request{ID: 1, Ping: true})
	if err != nil {
		return err
	}
	answered := make(chan error, 1)
	var res agent.Response
	go func() {
		if _, err := stdin.Write(append(ping, '\n')); err != nil {
			answered <- err
			return
		}
		var err error
		res, _, err = agent.ReadFrame(bufio.NewReader(stdout), 64<<10, func(agent.Response) (int, bool) { return 0, false })
		answered <- err
	}()
	select {
	case err = <-answered:
	case <-ctx.Done():
		err = ctx.Err()
	}
	switch {
	case err != nil:
		return fmt.Errorf("runtime: %w: %s did not answer a ping (%v); make setup installs the agent of this tree", ErrAgentProtocol, path, err)
	case res.Protocol != agent.Protocol:
		return fmt.Errorf("runtime: %w: %s speaks %q, this backend %q; make setup installs the agent of this tree", ErrAgentProtocol, path, res.Protocol, agent.Protocol)
	}
	return nil
}
