package container

import (
	"context"
	"io"
)

// Pacer paces bytes moved for a tenant that cost host CPU no sandbox
// limit counts, such as a file transfer through the agent's stream and
// the engine's copies: WaitN returns once n more bytes may move, or with
// ctx's error. A nil Pacer moves them at once. A *rate.Limiter is one,
// for n up to its burst.
type Pacer interface {
	WaitN(ctx context.Context, n int) error
}

// PaceChunk is the most bytes moved before a Pacer is asked again.
const PaceChunk = 32 << 10

// PacedReader reads r at p's pace: at most PaceChunk a read, each paid
// for before the next, so a reader slower than the writer holds the
// writer back through every buffer in between.
func PacedReader(ctx context.Context, r io.Reader, p Pacer) io.Reader {
	if p == nil {
		return r
	}
	return &pacedReader{ctx: ctx, r: r, p: p}
}

type pacedReader struct {
	ctx context.Context
	r   io.Reader
	p   Pacer
}

func (pr *pacedReader) Read(b []byte) (int, error) {
	if len(b) > PaceChunk {
		b = b[:PaceChunk]
	}
	n, err := pr.r.Read(b)
	if n > 0 {
		if werr := pr.p.WaitN(pr.ctx, n); werr != nil && err == nil {
			err = werr
		}
	}
	return n, err
}

// PacedWrite writes b to w PaceChunk at a time, each at p's pace (nil: at
// once), so a writer that bounds each Write bounds every chunk.
func PacedWrite(ctx context.Context, w io.Writer, b []byte, p Pacer) (int, error) {
	written := 0
	for len(b) > 0 {
		chunk := b[:min(len(b), PaceChunk)]
		if p != nil {
			if err := p.WaitN(ctx, len(chunk)); err != nil {
				return written, err
			}
		}
		n, err := w.Write(chunk)
		written += n
		if err != nil {
			return written, err
		}
		b = b[len(chunk):]
	}
	return written, nil
}
