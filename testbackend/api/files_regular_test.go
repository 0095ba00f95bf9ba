package api_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// notRegularWait bounds each request of the tests below: far more than a
// refusal takes on any machine, far less than the minute a read of a
// device used to hold its slot before it answered 500.
const notRegularWait = 20 * time.Second

// TestFilesNotRegular: reading or writing a device, a FIFO or a socket
// is 400 FILE_NOT_REGULAR at once, a directory 400 IS_A_DIRECTORY, in a
// real sandbox, and the refused write leaves the file as it was; a
// symlink to a device reads as the device and a write replaces it, a
// file the sandbox user may not read is 403, and regular files (through
// a symlink too) still read and write.
func TestFilesNotRegular(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	id := c.Running(tokA, map[string]any{"template": "python"}).ID
	c.HTTP = &http.Client{Timeout: notRegularWait}
	files := "/sandboxes/" + id + "/files"
	read := func(path string) apitest.Response {
		return c.Do("GET", files+"?path="+url.QueryEscape(path), tokA, nil, nil)
	}
	write := func(path, content string) apitest.Response {
		return c.Do("PUT", files, tokA, map[string]any{"path": path, "content": content}, nil)
	}

	// Positive control, made before the odd files exist.
	if r := write("/tmp/regular.txt", "plain"); r.Status != http.StatusOK {
		t.Fatalf("write a regular file: %v", r)
	}
	out := c.Command(tokA, id, `mkfifo /tmp/fifo && ln -s /dev/zero /tmp/zero-link && ln -s /tmp/regular.txt /tmp/regular-link &&
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("/tmp/sock")' && ls -l /tmp/fifo /tmp/sock &&
echo secret > /tmp/secret && chmod 000 /tmp/secret`, 0)
	if exitCode(t, out) != 0 {
		t.Fatalf("making the odd files: %v", out)
	}
	for _, path := range []string{"/dev/zero", "/dev/urandom", "/dev/null", "/tmp/fifo", "/tmp/sock"} {
		msg := apitest.ExpectErr(t, read(path), http.StatusBadRequest, "FILE_NOT_REGULAR")
		contains(t, msg, path)
		apitest.ExpectErr(t, write(path, "x"), http.StatusBadRequest, "FILE_NOT_REGULAR")
	}
	apitest.ExpectErr(t, read("/tmp/zero-link"), http.StatusBadRequest, "FILE_NOT_REGULAR")
	// Read as the sandbox user: a file of its own it may not read is
	// refused (the agent reads without a process, as that user).
	apitest.ExpectErr(t, read("/tmp/secret"), http.StatusForbidden, "PERMISSION_DENIED")
	for _, path := range []string{"/tmp", "/dev", "/home/user/"} {
		apitest.ExpectErr(t, read(path), http.StatusBadRequest, "IS_A_DIRECTORY")
		apitest.ExpectErr(t, write(path, "x"), http.StatusBadRequest, "IS_A_DIRECTORY")
	}
	// The refused writes changed nothing.
	if out := c.command(id, "test -p /tmp/fifo && test -S /tmp/sock && echo same"); out.Stdout != "same\n" {
		t.Fatalf("a refused write changed the file: %v", out)
	}
	for _, path := range []string{"/tmp/regular.txt", "/tmp/regular-link"} {
		if got := apitest.DecodeData[struct{ Content string }](t, read(path)); got.Content != "plain" {
			t.Fatalf("read %s: %q", path, got.Content)
		}
	}
	// A write replaces a symlink (it does not follow it), as before,
	// whatever it points to.
	for _, link := range []string{"/tmp/regular-link", "/tmp/zero-link"} {
		if r := write(link, "new"); r.Status != http.StatusOK {
			t.Fatalf("write over the symlink %s: %v", link, r)
		}
		if got := apitest.DecodeData[struct{ Content string }](t, read(link)); got.Content != "new" {
			t.Fatalf("read %s after the write: %q", link, got.Content)
		}
	}
	if got := apitest.DecodeData[struct{ Content string }](t, read("/tmp/regular.txt")); got.Content != "plain" {
		t.Fatalf("a write through a symlink changed its target: %q", got.Content)
	}
}

// TestFilesNotRegularTestMode: test mode refuses the devices every
// sandbox has as real mode does.
func TestFilesNotRegularTestMode(t *testing.T) {
	t.Parallel()
	c := testModeBackend(t, testbackend.Config{})
	id := c.Create(tokA, map[string]any{}).ID
	files := "/sandboxes/" + id + "/files"
	for _, path := range []string{"/dev/zero", "/dev/urandom", "/dev/null"} {
		apitest.ExpectErr(t, c.Do("GET", files+"?path="+path, tokA, nil, nil), http.StatusBadRequest, "FILE_NOT_REGULAR")
		apitest.ExpectErr(t, c.Do("PUT", files, tokA, map[string]any{"path": path, "content": "x"}, nil), http.StatusBadRequest, "FILE_NOT_REGULAR")
	}
	for _, path := range []string{"/tmp", "/dev", "/home/user"} {
		apitest.ExpectErr(t, c.Do("GET", files+"?path="+path, tokA, nil, nil), http.StatusBadRequest, "IS_A_DIRECTORY")
		apitest.ExpectErr(t, c.Do("PUT", files, tokA, map[string]any{"path": path, "content": "x"}, nil), http.StatusBadRequest, "IS_A_DIRECTORY")
	}
	if r := c.Do("PUT", files, tokA, map[string]any{"path": "/tmp/regular.txt", "content": "plain"}, nil); r.Status != http.StatusOK {
		t.Fatalf("write a regular file: %v", r)
	}
	if got := apitest.DecodeData[struct{ Content string }](t, c.Do("GET", files+"?path=/tmp/regular.txt", tokA, nil, nil)); got.Content != "plain" {
		t.Fatalf("read back %q", got.Content)
	}
}

// TestFileReadRacesASwappedFIFO: sandbox code swaps a FIFO and a regular
// file at a path, each in place for about a millisecond, while the file
// route reads it: a read script's check and open are milliseconds apart
// under gVisor, so the path often changes between them. Every
// read answers at once, with the file's content or FILE_NOT_REGULAR (or
// FILE_NOT_FOUND in the instant between the two renames), never held until
// the route's timeout: a read script that checks the path and then opens
// it would wait on the FIFO that took the file's place in between. The
// same holds in a run-mode sandbox, whose program is the swap.
func TestFileReadRacesASwappedFIFO(t *testing.T) {
	t.Parallel()
	const swapLife = 30 * 60 * 1000 // ms: the test deletes the sandbox long before
	// The path is a FIFO or the file in turn, each for about a millisecond
	// (absent for the instant between two renames). The pauses keep the
	// swap from spending its whole vCPU: without them the sandbox's reads
	// queued behind it, and the two swaps took two cores from the rest of
	// the suite for minutes. It runs until the sandbox goes, which lives
	// longer than the default 5 min: on a machine of this kind the 200
	// run-mode reads (each one the engine's exec) took 65 s beside the
	// rest of the suite, and slower machines of the kind are 4× slower.
	swapper := `import os, time
os.mkfifo("/tmp/f"); open("/tmp/r", "w").write("x")
while True:
    os.rename("/tmp/f", "/tmp/p"); time.sleep(0.001); os.rename("/tmp/p", "/tmp/f")
    os.rename("/tmp/r", "/tmp/p"); time.sleep(0.001); os.rename("/tmp/p", "/tmp/r")
`
	for _, mode := range []string{"commands", "run mode"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			c := realBackend(t)
			var id string
			if mode == "run mode" {
				id = c.Running(tokA, map[string]any{"template": "python", "cmd": []string{"python3", "-c", swapper}, "timeoutMs": swapLife}).ID
			} else {
				id = c.Running(tokA, map[string]any{"template": "python", "timeoutMs": swapLife}).ID
				swap := "nohup python3 -c '" + swapper + "' >/dev/null 2>&1 &" // swapper has no single quote
				if out := c.Command(tokA, id, swap, 0); exitCode(t, out) != 0 {
					t.Fatalf("start the swap: %v", out)
				}
			}
			c.HTTP = &http.Client{Timeout: notRegularWait}
			seen := map[string]int{}
			for i := 0; i < 200; i++ {
				r := c.Do("GET", "/sandboxes/"+id+"/files?path=/tmp/p", tokA, nil, nil)
				switch {
				case r.Status == http.StatusOK:
					seen["content"]++
				case r.ErrCode() == "FILE_NOT_REGULAR", r.ErrCode() == "FILE_NOT_FOUND":
					seen[r.ErrCode()]++
				default:
					t.Fatalf("read %d while the FIFO is swapped in and out: %v (so far %v)", i, r, seen)
				}
			}
			// Both sides of the race were met, or the test proved nothing.
			if seen["content"] == 0 || seen["FILE_NOT_REGULAR"] == 0 {
				t.Fatalf("the reads met only one side of the swap: %v", seen)
			}
			t.Logf("200 reads during the swap: %v", seen)
		})
	}
}
