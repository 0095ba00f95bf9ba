package agent

import (
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// outputs are a command's stdout and stderr pipes and the goroutines that
// read them. A command's answer must hold everything it wrote before it
// exited, however late the readers get the CPU; but a background process
// it started may keep the pipes open long after, and must not hold the
// answer back. So once the command has exited, drain waits for the readers
// to see the end of both pipes; if a background process keeps one open,
// then, after bgGrace, it waits only until the pipes hold no unread byte
// (all the command wrote has been read) and closes them.
type outputs struct {
	r, w [2]*os.File
	wg   sync.WaitGroup
	dst  [2]io.Writer
}

// Variables so that tests can shorten them or hold the readers back.
var (
	// bgGrace is how long after the exit the readers may take to see the
	// pipes end before a background process is assumed to hold them.
	bgGrace = 250 * time.Millisecond
	// drainMax bounds the wait for the readers to empty pipes that a
	// background process keeps writing to.
	drainMax = 10 * time.Second
	// readerDelay holds each reader back before its first read (tests: a
	// reader the scheduler did not run in time).
	readerDelay time.Duration
)

func newOutputs(stdout, stderr io.Writer) (*outputs, error) {
	o := &outputs{dst: [2]io.Writer{stdout, stderr}}
	for i := range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			o.close()
			return nil, err
		}
		o.r[i], o.w[i] = r, w
	}
	return o, nil
}

// started closes the write ends the child now holds and starts the readers.
func (o *outputs) started() {
	for i := range 2 {
		_ = o.w[i].Close()
		o.w[i] = nil
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			if readerDelay > 0 {
				time.Sleep(readerDelay)
			}
			_, _ = io.Copy(o.dst[i], o.r[i])
		}()
	}
}

// drain returns once the readers have read all the command wrote (see
// outputs).
func (o *outputs) drain() {
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(bgGrace):
	}
	deadline := time.Now().Add(drainMax)
	for time.Now().Before(deadline) && o.unread() > 0 {
		select {
		case <-done:
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
	for i := range 2 {
		_ = o.r[i].SetReadDeadline(time.Now()) // unblocks the reader
	}
	<-done
}

// unread is how many bytes the pipes hold that no reader has read yet.
func (o *outputs) unread() int {
	total := 0
	for i := range 2 {
		rc, err := o.r[i].SyscallConn()
		if err != nil {
			continue
		}
		_ = rc.Control(func(fd uintptr) {
			if n, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil {
				total += n
			}
		})
	}
	return total
}

// close releases whatever is still open.
func (o *outputs) close() {
	for i := range 2 {
		if o.w[i] != nil {
			_ = o.w[i].Close()
		}
		if o.r[i] != nil {
			_ = o.r[i].Close()
		}
	}
}
