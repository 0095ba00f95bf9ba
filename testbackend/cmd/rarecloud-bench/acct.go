package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Where the host's CPU goes, process by process (-cpu-by-process): the
// kernel's BSD process accounting (Debian's acct package, `accton`)
// writes a record for every process that ends, the many short ones a
// sandbox's start and removal run included (runsc invocations, the
// engine's re-executions of itself, the OCI hook); the long-lived engine
// processes are read from /proc before and after.

// acctRecordSize is the size of a version 3 record (struct acct_v3 in
// linux/acct.h).
const acctRecordSize = 64

// procCPU is one ended process's CPU time.
type procCPU struct {
	pid, ppid uint32
	comm      string
	cpu       time.Duration
}

// decodeComp turns a comp_t (3-bit base-8 exponent, 13-bit mantissa) into
// its value.
func decodeComp(c uint16) uint64 {
	return uint64(c&0x1fff) << (3 * (c >> 13))
}

// parseAcct reads version 3 records; others are skipped. Times are in
// units of 1/100 s (AHZ).
func parseAcct(data []byte) []procCPU {
	var out []procCPU
	for off := 0; off+acctRecordSize <= len(data); off += acctRecordSize {
		r := data[off : off+acctRecordSize]
		if r[1] != 3 {
			continue
		}
		le := binary.LittleEndian
		ticks := decodeComp(le.Uint16(r[32:])) + decodeComp(le.Uint16(r[34:]))
		comm, _, _ := bytes.Cut(r[48:64], []byte{0})
		out = append(out, procCPU{pid: le.Uint32(r[16:]), ppid: le.Uint32(r[20:]), comm: string(comm), cpu: time.Duration(ticks) * 10 * time.Millisecond})
	}
	return out
}

// processGroup names what an ended process was. runsc re-executes itself
// as "exe" (sandbox, gofer, their helpers), and so does dockerd (network
// set-up inside the container's namespace, and the OCI prestart hook
// runsc runs).
func processGroup(p procCPU, byPID map[uint32]procCPU, dockerd uint32) string {
	if p.comm != "exe" {
		return p.comm
	}
	parent, ok := byPID[p.ppid]
	switch {
	case p.ppid == dockerd:
		return "dockerd re-executed (setup-resolver, set-ipv6)"
	case ok && parent.comm == "runsc":
		return "dockerd's OCI hook (libnetwork-setkey), run by runsc create"
	case ok && parent.comm == "exe":
		return "runsc sandbox helpers (systrap stubs, umount)"
	default:
		return "runsc sandbox and gofer"
	}
}

// cpuByGroup adds up ended processes' CPU by group.
func cpuByGroup(procs []procCPU, dockerd uint32) map[string]time.Duration {
	byPID := make(map[uint32]procCPU, len(procs))
	for _, p := range procs {
		byPID[p.pid] = p
	}
	out := map[string]time.Duration{}
	for _, p := range procs {
		out[processGroup(p, byPID, dockerd)] += p.cpu
	}
	return out
}

// liveProcs is the running processes with these names (comm), each with
// its CPU time so far, from one walk of /proc.
func liveProcs(names ...string) []procCPU {
	var out []procCPU
	files, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := string(b)
		lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if lp < 0 || rp < lp {
			continue
		}
		comm, fields := s[lp+1:rp], strings.Fields(s[rp+1:])
		if !slices.Contains(names, comm) || len(fields) < 13 {
			continue
		}
		pid, _ := strconv.ParseUint(filepath.Base(filepath.Dir(f)), 10, 32)
		u, _ := strconv.ParseInt(fields[11], 10, 64)
		k, _ := strconv.ParseInt(fields[12], 10, 64)
		out = append(out, procCPU{pid: uint32(pid), comm: comm, cpu: time.Duration(u+k) * 10 * time.Millisecond})
	}
	return out
}

// engineProcs are the long-lived engine processes accounting does not see
// until they end.
var engineProcs = []string{"dockerd", "containerd"}

// cpuOf adds up processes' CPU time by name.
func cpuOf(procs []procCPU) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range procs {
		out[p.comm] += p.cpu
	}
	return out
}

// cpuProfile is process accounting switched on for a while.
type cpuProfile struct {
	file  string
	live0 map[string]time.Duration
}

var errNoAccton = errors.New("-cpu-by-process needs accton (Debian's acct package: apt-get install acct) and root")

// startCPUProfile switches process accounting on into a new file in dir.
func startCPUProfile(dir string) (*cpuProfile, error) {
	if _, err := exec.LookPath("accton"); err != nil {
		return nil, errNoAccton
	}
	f := filepath.Join(dir, "pacct")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		return nil, err
	}
	if out, err := exec.Command("accton", f).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: accton %s: %v: %s", errNoAccton, f, err, out)
	}
	return &cpuProfile{file: f, live0: cpuOf(liveProcs(engineProcs...))}, nil
}

// stop switches accounting off and says, per sandbox of n, where the CPU
// went, largest first.
func (c *cpuProfile) stop(n int) (string, error) {
	live := liveProcs(engineProcs...)
	if out, err := exec.Command("accton", "off").CombinedOutput(); err != nil {
		return "", fmt.Errorf("accton off: %v: %s", err, out)
	}
	data, err := os.ReadFile(c.file)
	if err != nil {
		return "", err
	}
	var dockerd uint32
	for _, p := range live {
		if p.comm == "dockerd" {
			dockerd = p.pid
		}
	}
	groups := cpuByGroup(parseAcct(data), dockerd)
	for name, t := range cpuOf(live) {
		groups[name+" (running)"] += t - c.live0[name]
	}
	return formatGroups(groups, n), nil
}

// formatGroups lists groups of at least 10 ms per sandbox, largest first,
// with the total of all.
func formatGroups(groups map[string]time.Duration, n int) string {
	if n <= 0 {
		return "no sandboxes"
	}
	type g struct {
		name string
		per  time.Duration
	}
	var gs []g
	var total time.Duration
	for name, t := range groups {
		total += t
		if per := t / time.Duration(n); per >= 10*time.Millisecond {
			gs = append(gs, g{name, per})
		}
	}
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].per != gs[j].per {
			return gs[i].per > gs[j].per
		}
		return gs[i].name < gs[j].name
	})
	parts := make([]string, len(gs))
	for i, x := range gs {
		parts[i] = fmt.Sprintf("%s %d ms", x.name, x.per.Milliseconds())
	}
	return fmt.Sprintf("%d ms per sandbox in all: %s", (total / time.Duration(n)).Milliseconds(), strings.Join(parts, ", "))
}
