package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/attacks"
)

// The hostile account's attacks, looping until stopped. An attacker's
// clients are on other machines: what the row measures is what the
// hostile account's requests cost the backend's host, not what its
// clients' own CPU costs it. So by default (-hostile-clients niced) they
// run in a process of their own at nice 19, which takes only CPU that
// nothing else on the host wants; in the bench's process their
// goroutines would also share the Go scheduler with the well-behaved
// account's client, a queue no real neighbour shares. -hostile-clients
// process runs that process at the same priority as everything else, and
// inline keeps them in the bench's process, to compare.

// Where the attacks' clients run (-hostile-clients).
const (
	clientsNiced   = "niced"
	clientsProcess = "process"
	clientsInline  = "inline"
)

// clientsWhere says, for the report, where the attacks' clients ran.
func clientsWhere(clients string) string {
	switch clients {
	case clientsInline:
		return "the bench's process, beside the well-behaved account's client (-hostile-clients inline)"
	case clientsProcess:
		return "a process of their own at the same priority (-hostile-clients process)"
	}
	return "a process of their own at nice 19, standing for other machines (-hostile-clients niced)"
}

// attackChildFlag makes the bench the attacks' process: it reads an
// attackPlan as one line of JSON on stdin, writes "ready" once the attacks
// are under way, and when stdin closes stops them and writes their
// attackResult as JSON.
const attackChildFlag = "hostile-attack-child"

// attackPlan is what the hostile account attacks.
type attackPlan struct {
	Base        string          `json:"base"`    // the API, with /v1
	Files       string          `json:"files"`   // its base sandbox holding the 8 MB file
	Flooder     string          `json:"flooder"` // its ALLOW_LIST python sandbox, "" without the DNS flood
	On          map[string]bool `json:"on"`      // attackKeys that run
	Concurrency int             `json:"concurrency"`
}

// attackResult is what the hostile account was answered.
type attackResult struct {
	Stats  []*attackStats `json:"stats"`
	Failed []string       `json:"failed"`
}

// add counts another round's answers in r, each attack's under its name.
func (r *attackResult) add(o attackResult) {
	for _, s := range o.Stats {
		i := slices.IndexFunc(r.Stats, func(x *attackStats) bool { return x.Name == s.Name })
		if i < 0 {
			r.Stats = append(r.Stats, &attackStats{Name: s.Name})
			i = len(r.Stats) - 1
		}
		r.Stats[i].add(s)
	}
	r.Failed = append(r.Failed, o.Failed...)
}

// attackRunner is a set of running attacks.
type attackRunner interface {
	// stop ends the attacks and says what they were answered.
	stop() (attackResult, error)
	// pid is the process of the attacks' clients, 0 for the bench's own.
	pid() int
}

// inlineAttacks run in the bench's process.
type inlineAttacks struct {
	c       *hostileClient
	halt    atomic.Bool
	wg      sync.WaitGroup
	flooder string // the flood's sandbox, "" when it does not flood
}

// floodPIDFile is where the flood's sandbox keeps its process id.
const floodPIDFile = "/home/user/flood.pid"

// startAttacks starts the loops of plan and returns once they are under
// way: the DNS flood (when it runs) has sent its first thousand queries.
func startAttacks(p attackPlan) *inlineAttacks {
	a := &inlineAttacks{c: newHostileClient(p.Base)}
	loop := func(key string, n int, f func()) {
		if !p.On[key] {
			return
		}
		for range n {
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				for !a.halt.Load() {
					f()
				}
			}()
		}
	}
	long := hostileBody("timeoutMs")
	loop("long", p.Concurrency, func() {
		a.c.do(atkLongNumber, http.MethodPatch, "/sandboxes/"+p.Files, long, expect{422: "INVALID_TIMEOUT"}, false)
		a.c.do(atkLongNumber, http.MethodPost, "/sandboxes", long, expect{422: "INVALID_TIMEOUT"}, false)
	})
	loop("device", p.Concurrency, func() {
		for _, dev := range []string{"/dev/zero", "/dev/urandom"} {
			a.c.do(atkDevice, http.MethodGet, "/sandboxes/"+p.Files+"/files?path="+dev, nil, expect{400: "FILE_NOT_REGULAR"}, false)
		}
	})
	loop("read", p.Concurrency, func() {
		st, _, n := a.c.do(atkLargeRead, http.MethodGet, "/sandboxes/"+p.Files+"/files?path=/home/user/lt", nil, expect{200: ""}, true)
		if st == http.StatusOK && n < 8_000_000 {
			a.c.fail(atkLargeRead, fmt.Sprintf("an answer of %d bytes for a file of 8,000,000", n))
		}
	})
	create := expect{201: "", 409: "HOST_SHARE_EXCEEDED"}
	gone := expect{200: "", 404: ""}
	loop("burst", 1, func() {
		var bw sync.WaitGroup
		for range hostileBurst {
			bw.Add(1)
			go func() {
				defer bw.Done()
				if st, body, _ := a.c.do(atkBurst, http.MethodPost, "/sandboxes", []byte(`{"template":"base","timeoutMs":60000}`), create, false); st == http.StatusCreated {
					a.c.do(atkBurst, http.MethodDelete, "/sandboxes/"+sandboxID(body), nil, gone, false)
				}
			}()
		}
		bw.Wait()
		time.Sleep(250 * time.Millisecond)
	})
	job := []byte(`{"template":"base","cmd":["sh","-c","head -c 1048576 /dev/zero | tr '\\0' x"]}`)
	loop("jobs", p.Concurrency, func() {
		st, body, _ := a.c.do(atkJobs, http.MethodPost, "/sandboxes", job, create, false)
		if st != http.StatusCreated {
			time.Sleep(250 * time.Millisecond)
			return
		}
		id := sandboxID(body)
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
			st, body, _ := a.c.do(atkJobs, http.MethodGet, "/sandboxes/"+id+"?waitFor=exited,terminated&timeoutMs=5000", nil, expect{200: ""}, false)
			if st == http.StatusOK && (bytes.Contains(body, []byte(`"status":"exited"`)) || bytes.Contains(body, []byte(`"status":"terminated"`))) {
				if st, _, n := a.c.do(atkJobs, http.MethodGet, "/sandboxes/"+id+"/logs", nil, expect{200: ""}, true); st == http.StatusOK && n < 1<<20 {
					a.c.fail(atkJobs, fmt.Sprintf("logs of %d bytes, want 1 MiB and more", n))
				}
				break
			}
			if st != http.StatusOK && st != http.StatusTooManyRequests {
				break
			}
		}
		a.c.do(atkJobs, http.MethodDelete, "/sandboxes/"+id, nil, gone, false)
	})
	if p.On["dns"] {
		// The flood runs inside its sandbox, bounded by its own clock and by
		// the sandbox's delete; it is under way once it has sent a thousand.
		ran := expect{200: ""}
		// Its process id is kept so that stop ends it, and a round's quiet
		// run after has no flood.
		a.flooder = p.Flooder
		start, _ := json.Marshal(map[string]any{"cmd": fmt.Sprintf("rm -f %s; nohup python3 -c %s %s 600 >/dev/null 2>&1 & echo $! > %s", attacks.DNSFloodMark, attacks.ShellQuote(attacks.DNSFloodScript), floodName, floodPIDFile), "timeoutMs": 20000})
		a.c.do(atkDNS, http.MethodPost, "/sandboxes/"+p.Flooder+"/commands", start, ran, false)
		flooding := false
		for deadline := time.Now().Add(time.Minute); !flooding && time.Now().Before(deadline); {
			_, body, _ := a.c.do(atkDNS, http.MethodPost, "/sandboxes/"+p.Flooder+"/commands", []byte(`{"cmd":"test -e `+attacks.DNSFloodMark+`","timeoutMs":20000}`), ran, false)
			flooding = bytes.Contains(body, []byte(`"exitCode":0`))
			time.Sleep(100 * time.Millisecond)
		}
		if !flooding {
			a.c.fail(atkDNS, "the flood never sent its first thousand queries")
		}
	}
	return a
}

func (a *inlineAttacks) pid() int { return 0 }

func (a *inlineAttacks) stop() (attackResult, error) {
	a.halt.Store(true)
	a.wg.Wait()
	if a.flooder != "" {
		// The flood ends with the attacks, and stop returns once it has.
		halt, _ := json.Marshal(map[string]any{"cmd": "p=$(cat " + floodPIDFile + ") && kill $p && while kill -0 $p 2>/dev/null; do sleep 0.05; done", "timeoutMs": 20000})
		var st int
		var body []byte
		for try := 0; ; try++ {
			st, body, _ = a.c.do(atkDNS, http.MethodPost, "/sandboxes/"+a.flooder+"/commands", halt, expect{200: ""}, false)
			if try == 5 || (st != http.StatusTooManyRequests && st != http.StatusServiceUnavailable) {
				break
			}
			time.Sleep(time.Second) // turned away: the flood still runs
		}
		if !bytes.Contains(body, []byte(`"exitCode":0`)) {
			a.c.fail(atkDNS, fmt.Sprintf("stopping the flood: HTTP %d %s", st, body))
		}
	}
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	res := attackResult{Failed: a.c.failed}
	for _, name := range a.c.order {
		res.Stats = append(res.Stats, a.c.stats[name])
	}
	return res, nil
}

// attackProcess is the attacks in a child process of the bench.
type attackProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startAttackProcess starts the bench again as the attacks' process and
// returns once it says they are under way.
func startAttackProcess(p attackPlan, niced bool) (*attackProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-"+attackChildFlag)
	if niced {
		// Every thread of the process inherits nice's priority, which
		// setpriority on a running Go process would give one thread only.
		cmd = exec.Command("nice", "-n", "19", self, "-"+attackChildFlag)
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("hostile neighbour: the attacks' process: %w", err)
	}
	ap := &attackProcess{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	plan, _ := json.Marshal(p)
	if _, err := stdin.Write(append(plan, '\n')); err != nil {
		ap.kill()
		return nil, fmt.Errorf("hostile neighbour: sending the attacks' plan: %w", err)
	}
	if line, err := ap.out.ReadString('\n'); err != nil || line != "ready\n" {
		ap.kill()
		return nil, fmt.Errorf("hostile neighbour: the attacks' process said %q, not ready: %v", line, err)
	}
	return ap, nil
}

func (ap *attackProcess) pid() int { return ap.cmd.Process.Pid }

func (ap *attackProcess) kill() {
	_ = ap.cmd.Process.Kill()
	_ = ap.cmd.Wait()
}

func (ap *attackProcess) stop() (attackResult, error) {
	var res attackResult
	ap.stdin.Close()
	err := json.NewDecoder(ap.out).Decode(&res)
	if werr := ap.cmd.Wait(); err == nil && werr != nil {
		err = werr
	}
	if err != nil {
		return res, fmt.Errorf("hostile neighbour: the attacks' process: %w", err)
	}
	return res, nil
}

// runAttackChild is the bench as the attacks' process (attackChildFlag).
func runAttackChild(stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("reading the attacks' plan: %w", err)
	}
	var p attackPlan
	if err := json.Unmarshal(line, &p); err != nil {
		return fmt.Errorf("the attacks' plan: %w", err)
	}
	a := startAttacks(p)
	if _, err := io.WriteString(stdout, "ready\n"); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, in); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	res, _ := a.stop()
	return json.NewEncoder(stdout).Encode(res)
}
