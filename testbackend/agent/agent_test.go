package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"
)

// session runs Serve over pipes and returns a request function.
func session(t *testing.T) func(Request) Response {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() { _ = Serve(context.Background(), inR, outW); outW.Close() }()
	t.Cleanup(func() { inW.Close() })
	br := bufio.NewReader(outR)
	enc := json.NewEncoder(inW)
	read := func() Response {
		t.Helper()
		res, _, err := ReadFrame(br, 64<<10, func(Response) (int, bool) { return 16 << 20, true })
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		return res
	}
	if err := enc.Encode(Request{ID: 9, Ping: true}); err != nil {
		t.Fatal(err)
	}
	if res := read(); res.ID != 9 || res.Protocol != Protocol {
		t.Fatalf("ping answered %+v", res)
	}
	return func(req Request) Response {
		t.Helper()
		if err := enc.Encode(req); err != nil {
			t.Fatal(err)
		}
		return read()
	}
}

func TestRun(t *testing.T) {
	call := session(t)
	res := call(Request{ID: 1, Argv: []string{"sh", "-c", `read x; echo "got $x $FOO"; echo err >&2; exit 3`}, Env: []string{"FOO=bar"}, Stdin: []byte("line\n"), MaxOutput: 1 << 20})
	if res.ID != 1 || res.ExitCode == nil || *res.ExitCode != 3 || string(res.Stdout) != "got line bar\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("%+v", res)
	}
	res = call(Request{ID: 2, Argv: []string{"sh", "-c", "head -c 5000 /dev/zero; exit 0"}, MaxOutput: 100})
	if !res.StdoutTruncated || len(res.Stdout) != 100 || *res.ExitCode != 0 {
		t.Fatalf("cap: %+v", res)
	}
	start := time.Now()
	res = call(Request{ID: 3, Argv: []string{"sh", "-c", "sleep 20 & sleep 30"}, TimeoutMs: 200})
	if !res.TimedOut || res.ExitCode != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("timeout: %+v", res)
	}
	// A background process outlives its command without delaying the answer.
	start = time.Now()
	res = call(Request{ID: 5, Argv: []string{"sh", "-c", "sleep 3 & echo started"}})
	if string(res.Stdout) != "started\n" || *res.ExitCode != 0 || time.Since(start) > 2*time.Second {
		t.Fatalf("background: %+v after %v", res, time.Since(start))
	}
	res = call(Request{ID: 4, Argv: []string{"no-such-program-here"}})
	if !res.NotFound || res.Error == "" {
		t.Fatalf("missing program: %+v", res)
	}
}

// TestOutputOfALateReader: what a command wrote before it exited is in its
// answer even when the readers of its output get the CPU long after the
// exit (a host busy with other sandboxes); exec's own pipes, closed 250 ms
// after the exit, lost it. A background process that keeps the pipes open
// still does not hold the answer back.
func TestOutputOfALateReader(t *testing.T) {
	readerDelay = 800 * time.Millisecond
	t.Cleanup(func() { readerDelay = 0 })
	call := session(t)
	res := call(Request{ID: 1, Argv: []string{"sh", "-c", "echo out; echo err >&2"}, MaxOutput: 1 << 20})
	if res.ExitCode == nil || *res.ExitCode != 0 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("late reader: %+v", res)
	}
	start := time.Now()
	res = call(Request{ID: 2, Argv: []string{"sh", "-c", "sleep 5 & echo started"}, MaxOutput: 1 << 20})
	if string(res.Stdout) != "started\n" || res.ExitCode == nil || *res.ExitCode != 0 || time.Since(start) > 3*time.Second {
		t.Fatalf("late reader and a background process: %+v after %v", res, time.Since(start))
	}
}
