package client

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// redactHeaders copies h for logging with credentials replaced.
func redactHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		val := strings.Join(v, ", ")
		switch strings.ToLower(k) {
		case "authorization", "proxy-authorization", "cookie", "set-cookie":
			if strings.HasPrefix(strings.ToLower(val), "bearer ") {
				val = "Bearer [REDACTED]"
			} else {
				val = "[REDACTED]"
			}
		}
		out[k] = val
	}
	return out
}

// redactBody hides the values of a request's env map: they are secrets
// the API itself never returns.
func redactBody(b []byte) []byte {
	if !bytes.Contains(b, []byte(`"env"`)) {
		return b
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return b
	}
	var env map[string]string
	if err := json.Unmarshal(m["env"], &env); err != nil || len(env) == 0 {
		return b
	}
	for k := range env {
		env[k] = "[REDACTED]"
	}
	red, err := json.Marshal(env)
	if err != nil {
		return b
	}
	m["env"] = red
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}

const maxLoggedBody = 4096

func logBody(b []byte) string {
	if len(b) > maxLoggedBody {
		return string(b[:maxLoggedBody]) + "...(truncated)"
	}
	return string(b)
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		return "empty answer"
	}
	return "unexpected answer: " + s
}
