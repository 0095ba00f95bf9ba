package main

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// acctRecord builds a version 3 record as the kernel writes it.
func acctRecord(version byte, pid, ppid uint32, comm string, utime, stime uint16) []byte {
	r := make([]byte, acctRecordSize)
	r[1] = version
	le := binary.LittleEndian
	le.PutUint32(r[16:], pid)
	le.PutUint32(r[20:], ppid)
	le.PutUint16(r[32:], utime)
	le.PutUint16(r[34:], stime)
	copy(r[48:], comm)
	return r
}

func TestDecodeComp(t *testing.T) {
	for _, c := range []struct {
		in   uint16
		want uint64
	}{{0, 0}, {7, 7}, {0x1fff, 8191}, {1<<13 | 3, 24}, {2<<13 | 5, 320}} {
		if got := decodeComp(c.in); got != c.want {
			t.Errorf("decodeComp(%#x) = %d, want %d", c.in, got, c.want)
		}
	}
}

// A sandbox's start as the kernel accounts it: dockerd (pid 100)
// re-executes itself, runsc create (200) runs dockerd's hook and starts
// the sandbox (300), whose stub (400) ends first; a version 2 record is
// skipped.
func TestCPUByGroup(t *testing.T) {
	var data []byte
	for _, r := range [][]byte{
		acctRecord(3, 10, 100, "exe", 12, 3),      // 150 ms: set-ipv6 or setup-resolver
		acctRecord(3, 11, 100, "exe", 1<<13|2, 0), // 160 ms
		acctRecord(3, 201, 200, "exe", 17, 1),     // 180 ms: the hook, runsc create its parent
		acctRecord(3, 400, 300, "exe", 4, 0),      // 40 ms: a stub of the sandbox
		acctRecord(3, 200, 50, "runsc", 3, 3),     // 60 ms
		acctRecord(3, 300, 50, "exe", 20, 7),      // 270 ms: the sandbox, reparented to the shim (50)
		acctRecord(3, 50, 1, "containerd-shim", 5, 5),
		acctRecord(2, 60, 1, "ignored", 100, 100),
	} {
		data = append(data, r...)
	}
	procs := parseAcct(append(data, 1, 2, 3)) // a torn tail is ignored
	if len(procs) != 7 {
		t.Fatalf("parsed %d records, want 7: %+v", len(procs), procs)
	}
	got := cpuByGroup(procs, 100)
	want := map[string]time.Duration{
		"dockerd re-executed (setup-resolver, set-ipv6)":              310 * time.Millisecond,
		"dockerd's OCI hook (libnetwork-setkey), run by runsc create": 180 * time.Millisecond,
		"runsc sandbox helpers (systrap stubs, umount)":               40 * time.Millisecond,
		"runsc":                   60 * time.Millisecond,
		"runsc sandbox and gofer": 270 * time.Millisecond,
		"containerd-shim":         100 * time.Millisecond,
	}
	if len(got) != len(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	// Per sandbox of 2, largest first, groups under 10 ms left out of the
	// list but not of the total.
	got["tiny"] = 10 * time.Millisecond
	s := formatGroups(got, 2)
	if !strings.HasPrefix(s, "485 ms per sandbox in all: dockerd re-executed (setup-resolver, set-ipv6) 155 ms, runsc sandbox and gofer 135 ms, dockerd's OCI hook") || strings.Contains(s, "tiny") {
		t.Fatalf("formatGroups = %q", s)
	}
}
