package testbackend

import (
	"context"
	"testing"
)

func TestHasRule(t *testing.T) {
	rules := `-N DOCKER-USER
-A DOCKER-USER -d 10.0.0.0/8 -i rcsbx0 -m comment --comment rarecloud-sandbox -j REJECT --reject-with icmp-net-prohibited
-A DOCKER-USER -o rcsbx0 -m conntrack ! --ctstate RELATED,ESTABLISHED -j DROP
-A DOCKER-USER -j RETURN`
	if !hasRule(rules, "-d 10.0.0.0/8", "-i rcsbx0") {
		t.Error("private range rule not found")
	}
	if hasRule(rules, "-d 192.168.0.0/16", "-i rcsbx0") {
		t.Error("found a rule that is not there")
	}
	if !hasRule(rules, "-o rcsbx0", "RELATED,ESTABLISHED", "DROP") {
		t.Error("inbound rule not found")
	}
	if hasRule(rules, "-i rcsbx1") {
		t.Error("matched another bridge")
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
