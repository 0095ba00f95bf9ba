package testbackend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// NetworkFile is where make setup describes the sandbox network it made.
const NetworkFile = "/etc/rarecloud/network.json"

// sandboxNetwork is what setup wrote to NetworkFile.
type sandboxNetwork struct {
	Network string   `json:"network"`
	Bridge  string   `json:"bridge"`
	DNS     string   `json:"dns"` // the sandboxes' DNS forwarder on the gateway
	Blocked []string `json:"blocked"`
}

// checkFirewall refuses to put sandboxes on the setup's network when its
// firewall rules are missing (after a reboot, or on a machine where setup
// never ran): without them a sandbox could reach the host and private
// ranges. Other networks are the operator's business.
func checkFirewall(ctx context.Context, network string) error {
	if network == "none" {
		return nil
	}
	data, err := os.ReadFile(NetworkFile)
	if errors.Is(err, os.ErrNotExist) {
		if network == "" {
			return fmt.Errorf("the sandbox network is not set up (%s is missing): run `make setup`, or start with --network none", NetworkFile)
		}
		return nil
	}
	if err != nil {
		return err
	}
	var n sandboxNetwork
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("%s: %w", NetworkFile, err)
	}
	if network != "" && network != n.Network {
		return nil
	}
	if n.Bridge == "" || len(n.Blocked) == 0 {
		return fmt.Errorf("%s names no bridge or no blocked ranges: run `make setup` again", NetworkFile)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	input, err := exec.CommandContext(ctx, "iptables", "-S", "INPUT").Output()
	if err != nil {
		return fmt.Errorf("cannot read the firewall rules of the sandbox network (iptables -S INPUT: %v): run the backend as root after `make setup`, or start with --network none", err)
	}
	user, err := exec.CommandContext(ctx, "iptables", "-S", "DOCKER-USER").Output()
	if err != nil {
		return fmt.Errorf("cannot read the firewall rules of the sandbox network (iptables -S DOCKER-USER: %v): run `make setup`, or start with --network none", err)
	}
	var missing []string
	if !hasRule(string(input), "-i "+n.Bridge, "REJECT") && !hasRule(string(input), "-i "+n.Bridge, "DROP") {
		missing = append(missing, "INPUT from "+n.Bridge+" (sandbox to host)")
	}
	for _, rule := range acceptsAheadOfReject(string(input), n.Bridge, n.DNS) {
		missing = append(missing, "no accept from "+n.Bridge+" ahead of the INPUT reject but DNS to "+n.DNS+" (found: "+rule+")")
	}
	for _, cidr := range n.Blocked {
		if !hasRule(string(user), "-d "+cidr, "-i "+n.Bridge) {
			missing = append(missing, "DOCKER-USER "+n.Bridge+" to "+cidr)
		}
	}
	if !hasRule(string(user), "-o "+n.Bridge, "RELATED,ESTABLISHED", "DROP") {
		missing = append(missing, "DOCKER-USER new connections into "+n.Bridge)
	}
	if len(missing) > 0 {
		return fmt.Errorf("the sandbox network %s lacks firewall rules: %s; run `make setup` to install them, or start with --network none", n.Network, strings.Join(missing, "; "))
	}
	return nil
}

// acceptsAheadOfReject lists the INPUT rules (iptables -S order) that accept
// traffic from the bridge before its first reject or drop, except the ones
// setup puts there on purpose: DNS (port 53) to the forwarder at dns.
func acceptsAheadOfReject(input, bridge, dns string) []string {
	var out []string
	for _, line := range strings.Split(input, "\n") {
		if !strings.Contains(line+" ", " -i "+bridge+" ") || strings.Contains(line, "! -i "+bridge+" ") {
			continue
		}
		if strings.Contains(line, " -j REJECT") || strings.Contains(line, " -j DROP") {
			break
		}
		if !strings.Contains(line, " -j ACCEPT") {
			continue
		}
		if dns != "" && strings.Contains(line, " -d "+dns+"/32 ") && strings.Contains(line+" ", " --dport 53 ") {
			continue
		}
		out = append(out, line)
	}
	return out
}

// hasRule reports whether one line of iptables -S output has every part.
func hasRule(rules string, parts ...string) bool {
	for _, line := range strings.Split(rules, "\n") {
		ok := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				ok = false
				break
			}
		}
		if ok && line != "" {
			return true
		}
	}
	return false
}
