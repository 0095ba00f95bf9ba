package api_test

import (
	"encoding/json"
	"net/http"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// heapObjects is the Go heap the process's live objects take, after a
// full collection: what the backend (in this process) holds on to.
func heapObjects() uint64 {
	runtime.GC()
	debug.FreeOSMemory()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// mibJob prints 1 MiB of "x" (no newline) and exits.
var mibJob = map[string]any{"cmd": []string{"sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' x"}}

// runJobs runs n mibJob sandboxes, at most par at once, each waited for
// until it has ended; it returns their ids. Failures are reported with
// Errorf (it runs them in goroutines).
func runJobs(t *testing.T, c *client, n, par int) []string {
	t.Helper()
	ids := make([]string, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ids[i] = runJob(t, c)
		}()
	}
	wg.Wait()
	return ids
}

// runJob creates one mibJob and long-polls until it has ended. The wait is
// generous: it only runs out when the job never ends.
func runJob(t *testing.T, c *client) string {
	st, env := c.Raw("POST", "/sandboxes", tokA, mibJob, nil)
	if st != http.StatusCreated {
		t.Errorf("create a job: %d %s", st, env.Data)
		return ""
	}
	var sb apitest.Sandbox
	if err := json.Unmarshal(env.Data, &sb); err != nil {
		t.Errorf("create a job: %v", err)
		return ""
	}
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		st, env := c.Raw("GET", "/sandboxes/"+sb.ID+"?waitFor=exited,terminated&timeoutMs=60000", tokA, nil, nil)
		if st == http.StatusOK && json.Unmarshal(env.Data, &sb) == nil && (sb.Status == "exited" || sb.Status == "terminated") {
			if sb.Status != "exited" || sb.ExitCode == nil || *sb.ExitCode != 0 {
				t.Errorf("job %s ended %s (exit %v, %s)", sb.ID, sb.Status, sb.ExitCode, sb.TerminationReason)
			}
			return sb.ID
		}
		if st != http.StatusOK {
			time.Sleep(time.Second) // an answer that is no status: not in a hurry
		}
	}
	t.Errorf("job %s has not ended after 10 minutes", sb.ID)
	return sb.ID
}

// TestRetainedJobLogsStayOnDisk: 300 run-mode jobs that each print 1 MiB
// leave the backend's heap within 64 MB of where it started (their logs
// are on disk, read when asked for), and the logs still come back in
// full. It used to keep every job's logs in memory for the whole
// retention: about 300 MB here.
func TestRetainedJobLogsStayOnDisk(t *testing.T) {
	// Not parallel: the heap is the whole process's, and no other test
	// may add to it while this one measures.
	b, err := startBackend(t.TempDir(), testbackend.Config{VCPULimit: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := newClient(t, b.URL())
	const jobs, par = 300, 8
	full := strings.Repeat("x", 1<<20)
	readLogs := func(id string) {
		t.Helper()
		logs := apitest.DecodeData[struct{ Logs string }](t, c.Do("GET", "/sandboxes/"+id+"/logs", tokA, nil, nil))
		if logs.Logs != full {
			t.Errorf("logs of %s: %d bytes, want 1 MiB of x (%q…)", id, len(logs.Logs), apitest.Truncate([]byte(logs.Logs), 40))
		}
	}

	// A first round warms up what stays anyway (connections, the
	// response validator, the engine client's buffers).
	for _, id := range runJobs(t, c, par, par) {
		readLogs(id)
	}
	if t.Failed() {
		t.FailNow()
	}
	before := heapObjects()

	ids := runJobs(t, c, jobs, par)
	if t.Failed() {
		t.FailNow()
	}
	after := heapObjects()
	growth := int64(after) - int64(before)
	t.Logf("heap of live objects: %d MB before, %d MB after %d jobs of 1 MiB each (%+d MB)", before>>20, after>>20, jobs, growth>>20)
	if growth >= 64<<20 {
		t.Errorf("the heap grew by %d MB over %d ended jobs, want less than 64 MB", growth>>20, jobs)
	}
	// Their logs are all still there, in full.
	for _, id := range []string{ids[0], ids[jobs/2], ids[jobs-1]} {
		readLogs(id)
	}
	if n := len(apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes", tokA, nil, nil))); n != jobs+par {
		t.Errorf("%d sandboxes listed, want the %d jobs retained", n, jobs+par)
	}
}
