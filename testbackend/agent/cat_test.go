package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCatRefusesWithoutBlocking: a FIFO with no writer, a device, a socket
// and a directory are refused at once with their codes; a regular file is
// copied (the positive control); a missing one and an over-long name say
// so. The FIFO is the case a blocking open would hang on.
func TestCatRefusesWithoutBlocking(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("plain\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		code int
		out  string
		err  string
	}{
		{path: fifo, code: CatNotRegular},
		{path: "/dev/zero", code: CatNotRegular},
		{path: sock, code: CatNotRegular},
		{path: dir, code: CatDirectory},
		{path: filepath.Join(dir, "missing"), code: CatMissing},
		{path: filepath.Join(dir, strings.Repeat("n", 300)), code: 1, err: "File name too long"},
		{path: filepath.Join(regular, "x"), code: 1, err: "Not a directory"},
		{path: regular, code: 0, out: "plain\n"},
	} {
		var out, errw bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- Cat(tc.path, 1<<20, &out, &errw) }()
		select {
		case code := <-done:
			if code != tc.code || out.String() != tc.out || !strings.Contains(errw.String(), tc.err) {
				t.Errorf("Cat(%s) = %d, out %q, err %q; want %d, %q, %q", tc.path, code, out.String(), errw.String(), tc.code, tc.out, tc.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Cat(%s) blocked", tc.path)
		}
	}
}

// TestCatStopsPastTheLimit: a file over the limit is copied only to a
// byte past it, however large it is: a sparse file of a terabyte costs a
// sandbox nothing, and copied whole it kept the engine and the backend
// busy until the file route's timeout. Positive control: a file within
// the limit is copied whole.
func TestCatStopsPastTheLimit(t *testing.T) {
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 40); err != nil {
		t.Skipf("no sparse file of a terabyte here: %v", err)
	}
	f.Close()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  string
		limit int64
		want  int
	}{
		{huge, 1000, 1001},
		{small, 10, 10},
		{small, 9, 10},
		{small, 0, 1},
	} {
		var out, errw bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- Cat(tc.path, tc.limit, &out, &errw) }()
		select {
		case code := <-done:
			if code != 0 || out.Len() != tc.want || errw.Len() != 0 {
				t.Errorf("Cat(%s, %d) = %d with %d bytes, stderr %q; want 0 with %d bytes", filepath.Base(tc.path), tc.limit, code, out.Len(), errw.String(), tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Cat(%s, %d) copied on past the limit", filepath.Base(tc.path), tc.limit)
		}
	}
}
