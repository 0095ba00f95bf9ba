package hostnet

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// iptables is one chain's rules as iptables -S prints them: the one place
// the backend reads the host's firewall.
func iptables(ctx context.Context, chain string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "iptables", "-S", chain).Output()
	if err != nil {
		return "", fmt.Errorf("iptables -S %s: %w", chain, err)
	}
	return string(out), nil
}

// CheckEgressAccept looks for setup's INPUT rule that admits traffic
// redirected (DNAT) from the gateway to the gateway ahead of the bridge's
// reject: without it restricted sandboxes could resolve nothing.
func CheckEgressAccept(ctx context.Context, bridge, gateway string) error {
	input, err := iptables(ctx, "INPUT")
	if err != nil {
		return fmt.Errorf("cannot read the INPUT rules (%v)", err)
	}
	if !egressAcceptAhead(parseRules(input, "INPUT"), bridge, gateway) {
		return fmt.Errorf("INPUT has no accept for DNS redirected to %s ahead of the reject of %s: run `make setup`", gateway, bridge)
	}
	return nil
}

// egressAcceptAhead reports whether rules hold, before the first reject or
// drop of the bridge's traffic, an accept of any interface's traffic to
// the gateway that a nat rule redirected there from the gateway itself.
func egressAcceptAhead(rules []rule, bridge, gateway string) bool {
	for _, r := range rules {
		_, anyIface := r.opts["-i"]
		orig := r.opts["--ctorigdst"]
		if r.target == "ACCEPT" && !r.negated && !anyIface && r.opts["-d"] == gateway+"/32" &&
			r.opts["--ctstate"] == "DNAT" && (orig == gateway || orig == gateway+"/32") {
			return true
		}
		if r.opts["-i"] == bridge && (r.target == "REJECT" || r.target == "DROP") {
			return false
		}
	}
	return false
}

// CheckFirewall refuses to put sandboxes on the setup's network when its
// firewall rules are missing (after a reboot, or on a machine where setup
// never ran): without them a sandbox could reach the host and private
// ranges. network is the engine network sandboxes go on ("" for setup's,
// "none" for none); other networks are the operator's business.
func CheckFirewall(ctx context.Context, network string) error {
	if network == "none" {
		return nil
	}
	n, ok, err := Load(File)
	if err != nil {
		return err
	}
	if !ok {
		if network == "" {
			return fmt.Errorf("the sandbox network is not set up (%s is missing): run `make setup`, or start with --network none", File)
		}
		return nil
	}
	if network != "" && network != n.Network {
		return nil
	}
	if n.Bridge == "" || len(n.Blocked) == 0 {
		return fmt.Errorf("%s names no bridge or no blocked ranges: run `make setup` again", File)
	}
	input, err := iptables(ctx, "INPUT")
	if err != nil {
		return fmt.Errorf("cannot read the firewall rules of the sandbox network (%v): run the backend as root after `make setup`, or start with --network none", err)
	}
	user, err := iptables(ctx, "DOCKER-USER")
	if err != nil {
		return fmt.Errorf("cannot read the firewall rules of the sandbox network (%v): run `make setup`, or start with --network none", err)
	}
	missing := missingRules(n, input, user)
	if len(missing) > 0 {
		return fmt.Errorf("the sandbox network %s lacks firewall rules: %s; run `make setup` to install them, or start with --network none", n.Network, strings.Join(missing, "; "))
	}
	return nil
}

// missingRules lists what the INPUT and DOCKER-USER chains (iptables -S
// output) lack for the sandbox network n to be closed.
func missingRules(n Network, input, user string) []string {
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
