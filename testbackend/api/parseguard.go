package api

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// MaxNumberLen bounds a number literal in a request body: longer than
// any value a field takes (an int64 has at most 20 characters), short
// enough that nothing costs more to read than the bytes it came in.
// decode refuses a longer one before anything parses it.
const MaxNumberLen = 32

// MaxMembers bounds the members of one object or array in a request
// body, and MaxNesting how deep they nest: four times the largest list a
// field takes (256 arguments or environment variables), and deeper than
// any request goes. Decoding builds a map or slice member by member
// before any field's own limit is checked, and a member costs the
// decoder tens of times the few bytes it takes in the body ("a":"" is
// six): an 8 MiB body of a million labels held some 100 MB.
const (
	MaxMembers = 1024
	MaxNesting = 16
)

// timeoutFields are the fields whose over-long number is a bad timeout
// (422 INVALID_TIMEOUT) rather than a malformed body.
var timeoutFields = map[string]bool{"timeoutMs": true, "idleTimeoutMs": true}

// maxFieldLen is the longest top-level key (quotes included) an error
// names; a longer one is not quoted back.
const maxFieldLen = 64

// parseGuard reads a request body and refuses it as soon as parsing it
// would cost far more than its bytes: a number literal longer than
// MaxNumberLen, an object or array of more than MaxMembers members, or
// nesting deeper than MaxNesting. Turning a long literal into an integer
// costs the square of its length (an 8 MiB one took minutes), and an
// error message that quotes it would send it back. The body is scanned as
// it arrives, so a refused one is not held in memory nor scanned past the
// point where it went over (plus what the last read brought). A number in
// a top-level timeout field is a bad value (422 INVALID_TIMEOUT, as any
// other bad timeout); anything else refused here is a malformed body (400
// INVALID_REQUEST). Bodies that are not JSON are left to the decoder.
type parseGuard struct {
	r    io.Reader
	scan parseScan
	err  error
}

func newParseGuard(r io.Reader) *parseGuard { return &parseGuard{r: r} }

func (g *parseGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	n, err := g.r.Read(p)
	if serr := g.scan.feed(p[:n]); serr != nil {
		g.err = serr
		return 0, serr
	}
	return n, err
}

// parseScan is the scanner's state between reads.
type parseScan struct {
	depth     int    // nesting of objects and arrays
	commas    []int  // commas so far in each open object or array, outermost first
	inString  bool   // inside a string
	escaped   bool   // the byte before was a backslash in a string
	str       []byte // the string being read, quotes included, up to maxFieldLen+1 bytes
	lastStr   []byte // the last string read whole (the same cap)
	field     []byte // the top-level key whose value is being read
	numLen    int    // characters of the number being read; 0: none
	topObject bool   // the body is an object
}

// feed scans the next bytes of the body.
func (s *parseScan) feed(p []byte) error {
	for _, b := range p {
		if s.inString {
			if len(s.str) <= maxFieldLen {
				s.str = append(s.str, b)
			}
			switch {
			case s.escaped:
				s.escaped = false
			case b == '\\':
				s.escaped = true
			case b == '"':
				s.inString = false
				s.lastStr = append(s.lastStr[:0], s.str...)
			}
			continue
		}
		if s.numLen > 0 {
			if b >= '0' && b <= '9' || b == '.' || b == 'e' || b == 'E' || b == '+' || b == '-' {
				if s.numLen++; s.numLen > MaxNumberLen {
					return longNumberErr(s.field, s.depth, s.topObject)
				}
				continue
			}
			s.numLen = 0
		}
		switch {
		case b == '"':
			s.inString = true
			s.str = append(s.str[:0], b)
		case b == '-' || b >= '0' && b <= '9':
			s.numLen = 1
		case b == '{' || b == '[':
			if s.depth == 0 && b == '{' {
				s.topObject = true
			}
			if s.depth == MaxNesting {
				return tooWideErr(s.field, s.depth, s.topObject, false)
			}
			s.depth++
			s.commas = append(s.commas, 0)
		case b == '}' || b == ']':
			if s.depth > 0 {
				s.depth--
				s.commas = s.commas[:s.depth]
			}
		case b == ',' && s.depth > 0:
			if s.commas[s.depth-1]++; s.commas[s.depth-1] >= MaxMembers {
				return tooWideErr(s.field, s.depth, s.topObject, true)
			}
		case b == ':' && s.depth == 1:
			s.field = append(s.field[:0], s.lastStr...)
		}
	}
	return nil
}

// fieldName is the top-level field a scan is in, or "" when it has none
// or its name is too long to quote back.
func fieldName(rawField []byte, topObject bool) string {
	var field string
	if topObject && len(rawField) <= maxFieldLen {
		_ = json.Unmarshal(rawField, &field)
	}
	return field
}

// tooWideErr refuses a body with an object or array of more than
// MaxMembers members (wide) or nested deeper than MaxNesting.
func tooWideErr(rawField []byte, depth int, topObject, wide bool) error {
	what := fmt.Sprintf("an object or array of more than %d members; lists in a request are far shorter (at most %d arguments, %d environment variables, %d labels)", MaxMembers, sandbox.MaxArgs, sandbox.MaxEnvVars, sandbox.MaxLabels)
	if !wide {
		what = fmt.Sprintf("objects or arrays nested more than %d deep", MaxNesting)
	}
	if field := fieldName(rawField, topObject); field != "" && depth > 1 {
		return apiErr(sandbox.CodeInvalidRequest, "field %s holds %s", field, what)
	}
	return apiErr(sandbox.CodeInvalidRequest, "request body holds %s", what)
}

func longNumberErr(rawField []byte, depth int, topObject bool) error {
	field := fieldName(rawField, topObject)
	switch {
	case depth == 1 && timeoutFields[field]:
		e := apiErr(sandbox.CodeInvalidTimeout, "%s is a number of more than %d characters; send an integer number of milliseconds (values above %d are clamped to it)", field, MaxNumberLen, sandbox.MaxTimeoutMs)
		e.Unprocessable = true
		return e
	case field != "":
		return apiErr(sandbox.CodeInvalidRequest, "field %s holds a number of more than %d characters; numbers in a request are at most %d characters", field, MaxNumberLen, MaxNumberLen)
	}
	return apiErr(sandbox.CodeInvalidRequest, "request body holds a number of more than %d characters; numbers in a request are at most %d characters", MaxNumberLen, MaxNumberLen)
}
