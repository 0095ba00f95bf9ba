package sandbox

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxEcho bounds what an error message quotes back of one value: a
// client's label key, template name, unknown field or the like may be as
// long as the body limit, and an answer that repeats it whole (escaped,
// up to six times its size) would cost more than the request that sent
// it. A longer value is cut at a character boundary and marked with "…",
// which still shows the client which value is meant.
const MaxEcho = 128

// Message formats an error message as fmt.Sprintf does, each string or
// error argument cut to MaxEcho bytes. errorf and the api package's
// errors build every message through it.
func Message(format string, args ...any) string {
	short, copied := args, false
	for i, a := range args {
		var s string
		switch v := a.(type) {
		case string:
			s = v
		case error:
			s = v.Error()
		default:
			continue
		}
		if len(s) <= MaxEcho {
			continue
		}
		if !copied { // the caller's slice stays as it was
			short, copied = append([]any(nil), args...), true
		}
		short[i] = cutEcho(s)
	}
	return fmt.Sprintf(format, short...)
}

// cutEcho is s cut to at most MaxEcho bytes, at a character boundary,
// then "…".
func cutEcho(s string) string {
	n := MaxEcho
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// firstLine is s up to its first line break: what a process said first,
// for a message that quotes it.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// unresponsiveAdvice ends every SANDBOX_UNRESPONSIVE message: what the
// client can change.
const unresponsiveAdvice = "code in a sandbox must not stop, signal or close its first process; delete the sandbox if it stays unresponsive"
