package hostnet

import (
	"context"
	"path/filepath"
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

var testNet = Network{Network: "rarecloud-sandbox", Bridge: "rcsbx0", DNS: "172.30.99.1", Blocked: []string{"10.0.0.0/8", "169.254.0.0/16"}}

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
	if err := CheckFirewall(context.Background(), ""); err != nil {
		t.Fatalf("%v (run `make setup`)", err)
	}
	if err := CheckFirewall(context.Background(), "none"); err != nil {
		t.Fatal(err)
	}
}

// TestEgressAccept: setup's accept of redirected DNS is found ahead of the
// bridge's reject; one that comes after it, names an interface, is for
// another address, or is missing is not.
func TestEgressAccept(t *testing.T) {
	const accept = "-A INPUT -d 172.30.99.1/32 -m conntrack --ctstate DNAT --ctorigdst 172.30.99.1 -m comment --comment rarecloud-sandbox -j ACCEPT"
	const reject = "-A INPUT -i rcsbx0 -m comment --comment rarecloud-sandbox -j REJECT --reject-with icmp-port-unreachable"
	for _, tc := range []struct {
		name, input string
		want        bool
	}{
		{"setup's rules", goodInput, true},
		{"the /32 form of the original address", strings.Replace(goodInput, "--ctorigdst 172.30.99.1", "--ctorigdst 172.30.99.1/32", 1), true},
		{"missing", strings.Replace(goodInput, accept, "", 1), false},
		{"after the reject", strings.Replace(strings.Replace(goodInput, accept+"\n", "", 1), reject, reject+"\n"+accept, 1), false},
		{"from one interface only", strings.Replace(goodInput, accept, strings.Replace(accept, "-d 172.30.99.1/32", "-d 172.30.99.1/32 -i eth0", 1), 1), false},
		{"another original address", strings.Replace(goodInput, "--ctorigdst 172.30.99.1", "--ctorigdst 10.0.0.1", 1), false},
		{"a drop", strings.Replace(goodInput, accept, strings.Replace(accept, "-j ACCEPT", "-j DROP", 1), 1), false},
	} {
		if got := egressAcceptAhead(parseRules(tc.input, "INPUT"), "rcsbx0", "172.30.99.1"); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNetworkFileRoundTrip: what Write puts in a file, Load reads back;
// a second Write of the same description changes nothing.
func TestNetworkFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "network.json")
	n := Network{Network: "rarecloud-sandbox", Bridge: "rcsbx0", Subnet: "172.30.99.0/24", Gateway: "172.30.99.1", IPAMRange: "172.30.99.0/26",
		Netns: true, DNS: "172.30.99.1", MTU: 1400, Blocked: []string{"10.0.0.0/8"}, Engine: "unix:///run/rarecloud/docker.sock"}
	if changed, err := n.Write(path); err != nil || !changed {
		t.Fatalf("first write: changed %v, %v", changed, err)
	}
	got, ok, err := Load(path)
	if err != nil || !ok || got.Network != n.Network || got.IPAMRange != n.IPAMRange || !got.Netns || got.MTU != 1400 || len(got.Blocked) != 1 || got.Engine != n.Engine {
		t.Fatalf("read back %+v ok=%v err=%v", got, ok, err)
	}
	if changed, err := n.Write(path); err != nil || changed {
		t.Fatalf("second write: changed %v, %v", changed, err)
	}
	if _, ok, err := Load(filepath.Join(t.TempDir(), "none.json")); ok || err != nil {
		t.Fatalf("a missing file: ok=%v err=%v", ok, err)
	}
}
