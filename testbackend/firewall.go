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
	missing := missingRules(n, string(input), string(user))
	if len(missing) > 0 {
		return fmt.Errorf("the sandbox network %s lacks firewall rules: %s; run `make setup` to install them, or start with --network none", n.Network, strings.Join(missing, "; "))
	}
	return nil
}

// missingRules lists what the INPUT and DOCKER-USER chains (iptables -S
// output) lack for the sandbox network n to be closed.
func missingRules(n sandboxNetwork, input, user string) []string {
	inRules, userRules := parseRules(input, "INPUT"), parseRules(user, "DOCKER-USER")
	var missing []string
	block := blockAt(inRules, map[string]string{"-i": n.Bridge})
	if block < 0 {
		missing = append(missing, "INPUT from "+n.Bridge+" (sandbox to host)")
	}
	for _, r := range acceptsAhead(inRules, block, "-i", n.Bridge, n.DNS) {
		missing = append(missing, "no accept from "+n.Bridge+" ahead of the INPUT reject but DNS to "+n.DNS+" (found: "+r+")")
	}
	last := -1
	for _, cidr := range n.Blocked {
		i := blockAt(userRules, map[string]string{"-i": n.Bridge, "-d": cidr})
		if i < 0 {
			missing = append(missing, "DOCKER-USER "+n.Bridge+" to "+cidr)
		}
		last = max(last, i)
	}
	for _, r := range acceptsAhead(userRules, last, "-i", n.Bridge, "") {
		missing = append(missing, "no accept from "+n.Bridge+" ahead of the DOCKER-USER blocks (found: "+r+")")
	}
	inbound := blockAt(userRules, map[string]string{"-o": n.Bridge, "-m": "conntrack", "!--ctstate": "RELATED,ESTABLISHED"})
	if inbound < 0 {
		missing = append(missing, "DOCKER-USER new connections into "+n.Bridge)
	}
	for _, r := range acceptsAhead(userRules, inbound, "-o", n.Bridge, "") {
		missing = append(missing, "no accept into "+n.Bridge+" ahead of the DOCKER-USER inbound drop (found: "+r+")")
	}
	return missing
}

// acceptsAhead lists the rules ahead of rules[upTo] (iptables -S order)
// that may accept or return traffic on the interface (key "-i" for traffic
// from it, "-o" for traffic into it) before a block gets to see it, except
// the ones setup puts there on purpose: DNS (port 53) to the forwarder at
// dns. upTo < 0 means every rule.
func acceptsAhead(rules []rule, upTo int, key, iface, dns string) []string {
	if upTo < 0 || upTo > len(rules) {
		upTo = len(rules)
	}
	var out []string
	for _, r := range rules[:upTo] {
		if r.target != "ACCEPT" && r.target != "RETURN" {
			continue
		}
		if v, set := r.opts[key]; set && v != iface {
			continue // another interface: not the bridge's traffic
		}
		if dns != "" && r.opts[key] == iface && r.opts["-d"] == dns+"/32" && r.opts["--dport"] == "53" && !r.negated {
			continue
		}
		// Traffic to the DNS address that a nat rule redirected there from
		// the DNS address itself (a per-sandbox DNS filter on another port).
		if dns != "" && r.opts["-d"] == dns+"/32" && r.opts["--ctstate"] == "DNAT" && r.opts["--ctorigdst"] == dns && !r.negated {
			continue
		}
		out = append(out, r.raw)
	}
	return out
}

// rule is one rule of iptables -S output: its match options (a negated
// option's name gets a "!" prefix) and its target.
type rule struct {
	opts    map[string]string
	negated bool
	target  string
	raw     string
}

// parseRules reads the rules of one chain from iptables -S output.
func parseRules(out, chain string) []rule {
	var rules []rule
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "-A" || f[1] != chain {
			continue
		}
		r := rule{opts: map[string]string{}, raw: line}
		neg := false
		for i := 2; i < len(f); i++ {
			tok := f[i]
			if tok == "!" {
				neg = true
				continue
			}
			if !strings.HasPrefix(tok, "-") {
				continue
			}
			val := ""
			if i+1 < len(f) && f[i+1] != "!" && !strings.HasPrefix(f[i+1], "-") {
				val = f[i+1]
				i++
			}
			switch {
			case tok == "-j":
				r.target = val
			case neg:
				r.opts["!"+tok] = val
				r.negated = true
			case tok == "-m" && r.opts["-m"] != "":
				// several match modules: keep the one a check names
				if val != "comment" {
					r.opts["-m"] = val
				}
			default:
				r.opts[tok] = val
			}
			neg = false
		}
		rules = append(rules, r)
	}
	return rules
}

// blockAt is the index of the first rule that rejects or drops exactly the
// traffic want describes: every wanted option with its value (a negated
// one only where want names it with "!"), and no other match but a
// comment and the reject's own options. It is -1 when there is none.
func blockAt(rules []rule, want map[string]string) int {
	allowed := map[string]bool{"--comment": true, "--reject-with": true}
	for i, r := range rules {
		if r.target != "REJECT" && r.target != "DROP" {
			continue
		}
		ok := true
		for k, v := range want {
			if r.opts[k] != v {
				ok = false
			}
		}
		for k := range r.opts {
			if _, wanted := want[k]; !wanted && !allowed[k] && (k != "-m" || r.opts[k] != "comment") {
				ok = false
			}
		}
		if ok {
			return i
		}
	}
	return -1
}
