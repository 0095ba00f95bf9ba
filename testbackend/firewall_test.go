package testbackend

import (
	"context"
	"strings"
	"testing"
)

// The rules make setup installs (iptables -S INPUT and DOCKER-USER).
const (
	goodInput = `-P INPUT ACCEPT
-A INPUT -d 172.30.99.1/32 -m conntrack --ctstate DNAT --ctorigdst 172.30.99.1 -m comment --comment rarecloud-sandbox -j ACCEPT
-A INPUT -d 172.30.99.1/32 -i rcsbx0 -p udp -m udp --dport 53 -m comment --comment rarecloud-sandbox -j ACCEPT
-A INPUT -d 172.30.99.1/32 -i rcsbx0 -p tcp -m tcp --dport 53 -m comment --comment rarecloud-sandbox -j ACCEPT
-A INPUT -i rcsbx0 -m comment --comment rarecloud-sandbox -j REJECT --reject-with icmp-port-unreachable`
	goodUser = `-N DOCKER-USER
-A DOCKER-USER -d 10.0.0.0/8 -i rcsbx0 -m comment --comment rarecloud-sandbox -j REJECT --reject-with icmp-net-prohibited
-A DOCKER-USER -d 169.254.0.0/16 -i rcsbx0 -m comment --comment rarecloud-sandbox -j REJECT --reject-with icmp-net-prohibited
-A DOCKER-USER -o rcsbx0 -m conntrack ! --ctstate RELATED,ESTABLISHED -m comment --comment rarecloud-sandbox -j DROP
-A DOCKER-USER -j RETURN`
)

var testNet = sandboxNetwork{Network: "rarecloud-sandbox", Bridge: "rcsbx0", DNS: "172.30.99.1", Blocked: []string{"10.0.0.0/8", "169.254.0.0/16"}}

func TestMissingRulesAcceptsSetupRules(t *testing.T) {
	if m := missingRules(testNet, goodInput, goodUser); len(m) != 0 {
		t.Fatalf("setup's own rules reported as missing: %q", m)
	}
}

// Every rule that looks like a block but lets the traffic through must be
// refused, each with the part it lacks named.
func TestMissingRulesRefusesLookalikes(t *testing.T) {
	replace := func(s, old, with string) string {
		t.Helper()
		if !strings.Contains(s, old) {
			t.Fatalf("test case does not apply: %q not in the rules", old)
		}
		return strings.Replace(s, old, with, 1)
	}
	const (
		rejectAll = "-A INPUT -i rcsbx0 -m comment --comment rarecloud-sandbox -j REJECT --reject-with icmp-port-unreachable"
		private   = "-A DOCKER-USER -d 10.0.0.0/8 -i rcsbx0 -m comment --comment rarecloud-sandbox -j REJECT --reject-with icmp-net-prohibited"
		inbound   = "-A DOCKER-USER -o rcsbx0 -m conntrack ! --ctstate RELATED,ESTABLISHED -m comment --comment rarecloud-sandbox -j DROP"
	)
	cases := []struct {
		name, input, user, want string
	}{
		{"INPUT block missing", replace(goodInput, rejectAll, ""), goodUser, "INPUT from rcsbx0"},
		{"INPUT block accepts", replace(goodInput, rejectAll, "-A INPUT -i rcsbx0 -j ACCEPT"), goodUser, "INPUT from rcsbx0"},
		{"INPUT block for every other interface", replace(goodInput, rejectAll, "-A INPUT ! -i rcsbx0 -j REJECT"), goodUser, "INPUT from rcsbx0"},
		{"INPUT block of one port only", replace(goodInput, rejectAll, "-A INPUT -i rcsbx0 -p tcp --dport 22 -j REJECT"), goodUser, "INPUT from rcsbx0"},
		{"INPUT accept ahead", replace(goodInput, rejectAll, "-A INPUT -i rcsbx0 -p tcp --dport 8080 -j ACCEPT\n"+rejectAll), goodUser, "ahead of the INPUT reject"},
		{"INPUT accept of every interface ahead", replace(goodInput, rejectAll, "-A INPUT -j ACCEPT\n"+rejectAll), goodUser, "ahead of the INPUT reject"},
		{"INPUT accept of DNAT from another address", replace(goodInput, "--ctorigdst 172.30.99.1", "--ctorigdst 10.0.0.1"), goodUser, "ahead of the INPUT reject"},
		{"INPUT DNS accept to another address", replace(goodInput, "-d 172.30.99.1/32 -i rcsbx0 -p udp", "-d 172.30.99.7/32 -i rcsbx0 -p udp"), goodUser, "ahead of the INPUT reject"},
		{"private range missing", goodInput, replace(goodUser, private, ""), "DOCKER-USER rcsbx0 to 10.0.0.0/8"},
		{"private range accepted", goodInput, replace(goodUser, private, strings.Replace(private, "-j REJECT --reject-with icmp-net-prohibited", "-j ACCEPT", 1)), "DOCKER-USER rcsbx0 to 10.0.0.0/8"},
		{"private range from every other interface", goodInput, replace(goodUser, private, strings.Replace(private, "-i rcsbx0", "! -i rcsbx0", 1)), "DOCKER-USER rcsbx0 to 10.0.0.0/8"},
		{"private range except one address", goodInput, replace(goodUser, private, strings.Replace(private, "-d 10.0.0.0/8", "! -d 10.0.0.0/8", 1)), "DOCKER-USER rcsbx0 to 10.0.0.0/8"},
		{"accept ahead of the private blocks", goodInput, replace(goodUser, private, "-A DOCKER-USER -i rcsbx0 -j ACCEPT\n"+private), "ahead of the DOCKER-USER blocks"},
		{"inbound missing", goodInput, replace(goodUser, inbound, ""), "new connections into rcsbx0"},
		{"inbound drops only established", goodInput, replace(goodUser, inbound, strings.Replace(inbound, "! --ctstate", "--ctstate", 1)), "new connections into rcsbx0"},
		{"inbound accepted", goodInput, replace(goodUser, inbound, strings.Replace(inbound, "-j DROP", "-j ACCEPT", 1)), "new connections into rcsbx0"},
		{"accept into the bridge ahead", goodInput, replace(goodUser, inbound, "-A DOCKER-USER -o rcsbx0 -j ACCEPT\n"+inbound), "ahead of the DOCKER-USER inbound drop"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := missingRules(testNet, tc.input, tc.user)
			if !strings.Contains(strings.Join(m, "; "), tc.want) {
				t.Fatalf("want %q among the missing rules, got %q", tc.want, m)
			}
		})
	}
}

// The machine's own network, as make setup left it, passes the check; a
// backend would refuse to start otherwise.
func TestFirewallOfThisMachine(t *testing.T) {
	if err := checkFirewall(context.Background(), ""); err != nil {
		t.Fatalf("%v (run `make setup`)", err)
	}
	if err := checkFirewall(context.Background(), "none"); err != nil {
		t.Fatal(err)
	}
}
