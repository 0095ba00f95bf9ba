package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// An answer goes out as a frame: one line of JSON, the Response without
// its output, then the output's bytes as they are, stdout then stderr, as
// many as the line's stdoutLen and stderrLen say. Output is most of what
// an agent sends (a file read is up to 8 MB); as base64 inside the JSON it
// was a third longer, and both sides spent a pass over it encoding and
// decoding, all of it host CPU that no sandbox limit counts.

// ErrFrame is what ReadFrame answers for bytes that are not a frame, or a
// frame longer than its reader allows.
var ErrFrame = errors.New("not an agent frame")

// WriteFrame writes res to w as one frame. Frames written to one stream
// by several goroutines need a lock around each call.
func WriteFrame(w io.Writer, res Response) error {
	res.StdoutLen, res.StderrLen = len(res.Stdout), len(res.Stderr)
	head, err := json.Marshal(res)
	if err != nil {
		return err
	}
	for _, b := range [][]byte{append(head, '\n'), res.Stdout, res.Stderr} {
		if len(b) == 0 {
			continue
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// ReadFrame reads one frame from br. Its line may be at most maxLine
// bytes. room says, from the line, how many bytes of output each of its
// streams may have, and whether the output is wanted: a frame with more is
// ErrFrame, found before its output is read; output not wanted is read
// and dropped. n is the frame's length in bytes.
func ReadFrame(br *bufio.Reader, maxLine int, room func(head Response) (most int, keep bool)) (res Response, n int, err error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxLine {
			return res, n, fmt.Errorf("%w: a line of more than %d bytes", ErrFrame, maxLine)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return res, len(line), err
		}
		break
	}
	n = len(line)
	if trimmed := bytes.TrimSpace(line); len(trimmed) == 0 || trimmed[0] != '{' {
		return res, n, fmt.Errorf("%w: a line that is not an answer", ErrFrame)
	}
	if err := json.Unmarshal(line, &res); err != nil {
		return res, n, fmt.Errorf("%w: a line that is not an answer (%v)", ErrFrame, err)
	}
	most, keep := room(res)
	for _, l := range []int{res.StdoutLen, res.StderrLen} {
		if l < 0 || l > most {
			return res, n, fmt.Errorf("%w: an answer of %d bytes of output on one stream, at most %d allowed", ErrFrame, l, most)
		}
	}
	for _, s := range []struct {
		out *[]byte
		len int
	}{{&res.Stdout, res.StdoutLen}, {&res.Stderr, res.StderrLen}} {
		switch {
		case s.len == 0:
		case keep:
			*s.out = make([]byte, s.len)
			m, err := io.ReadFull(br, *s.out)
			n += m
			if err != nil {
				return res, n, unexpected(err)
			}
		default:
			m, err := io.CopyN(io.Discard, br, int64(s.len))
			n += int(m)
			if err != nil {
				return res, n, unexpected(err)
			}
		}
	}
	return res, n, nil
}

// unexpected is a stream that ended inside a frame.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
