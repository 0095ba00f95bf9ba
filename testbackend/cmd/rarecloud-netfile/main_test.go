package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/hostnet"
)

func TestWritesWhatHostnetReads(t *testing.T) {
	out := filepath.Join(t.TempDir(), "network.json")
	args := []string{"-out", out, "-network", "rarecloud-sandbox", "-bridge", "rcsbx0", "-subnet", "172.30.99.0/24",
		"-gateway", "172.30.99.1", "-ipam-range", "172.30.99.0/26", "-netns", "-dns", "172.30.99.1", "-mtu", "1400",
		"-blocked", "10.0.0.0/8, 169.254.0.0/16", "-engine", "unix:///run/rarecloud/docker.sock"}
	if err := run(args); err != nil {
		t.Fatal(err)
	}
	n, ok, err := hostnet.Load(out)
	if err != nil || !ok || n.Bridge != "rcsbx0" || !n.Netns || n.MTU != 1400 || strings.Join(n.Blocked, " ") != "10.0.0.0/8 169.254.0.0/16" {
		t.Fatalf("read back %+v ok=%v err=%v", n, ok, err)
	}
}

func TestRefusesWhatNoReaderCouldUse(t *testing.T) {
	base := []string{"-out", filepath.Join(t.TempDir(), "n.json"), "-network", "n", "-bridge", "b"}
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"no subnet", "-subnet", nil},
		{"gateway outside", "-gateway", []string{"-subnet", "172.30.99.0/24", "-gateway", "10.0.0.1"}},
		{"ipam outside", "-ipam-range", []string{"-subnet", "172.30.99.0/24", "-gateway", "172.30.99.1", "-ipam-range", "10.0.0.0/26"}},
		{"bad blocked", "-blocked", []string{"-subnet", "172.30.99.0/24", "-gateway", "172.30.99.1", "-blocked", "10.0.0.0/33"}},
	} {
		err := run(append(append([]string{}, base...), tc.args...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}
