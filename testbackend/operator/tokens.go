package operator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/api"
)

// tokensFile is the tokens file's layout; T and A are the types of its
// entries, the backend's Config's.
type tokensFile[T, A any] struct {
	Tokens   []T `json:"tokens"`
	Accounts []A `json:"accounts"`
}

// ReadTokensFile reads and decodes the tokens file, refusing one that its
// group or others may read or write unless shared says it is meant to be,
// one with fields T and A do not have, and one that lists no tokens.
// lines holds the line of each entry of "tokens", for CheckTokens.
func ReadTokensFile[T, A any](path string, shared bool) (tokens []T, accounts []A, lines []int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tokens file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat() // of the file opened, not of what the path names later
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tokens file: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && !shared {
		return nil, nil, nil, fmt.Errorf("tokens file %s may be read or written by its group or others (mode %04o): run chmod 600 %s, or pass --allow-shared-tokens-file if it is meant to be shared", path, perm, path)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	var tf tokensFile[T, A]
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&tf); err != nil {
		return nil, nil, nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	if len(tf.Tokens) == 0 {
		return nil, nil, nil, fmt.Errorf("tokens file %s lists no tokens", path)
	}
	return tf.Tokens, tf.Accounts, entryLines(data), nil
}

// CheckTokens checks the tokens the API is to accept: each has a token
// and an account and only known scopes, and no token is given twice (a
// token names one account). file is the tokens file they come from, and
// lines the line of each of its entries (ReadTokensFile), so that a
// repeat names both; file is "" for tokens given in process.
func CheckTokens(tokens []api.Token, file string, lines []int) error {
	seen := make(map[string]int, len(tokens))
	for i, t := range tokens {
		if t.Token == "" || t.Account == "" {
			return fmt.Errorf("token %d: token and account are required", i)
		}
		if j, dup := seen[t.Token]; dup {
			if file != "" {
				return fmt.Errorf("tokens file %s: tokens[%d]%s repeats the token of tokens[%d]%s: give each token once (a token names one account)", file, i, atLine(lines, i), j, atLine(lines, j))
			}
			return fmt.Errorf("token %d repeats token %d: give each token once (a token names one account)", i, j)
		}
		seen[t.Token] = i
		for _, sc := range t.Scopes {
			if sc != api.ScopeRead && sc != api.ScopeWrite {
				return fmt.Errorf("token %d: unknown scope %q (want %s or %s)", i, sc, api.ScopeRead, api.ScopeWrite)
			}
		}
	}
	return nil
}

// entryLines is the line (from 1) on which each entry of the top-level
// "tokens" array starts, or nil when it cannot tell (the file decoded
// already, so it always can).
func entryLines(data []byte) []int {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		if key != "tokens" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return nil
		}
		var lines []int
		for dec.More() {
			off := int(dec.InputOffset())
			for off < len(data) && bytes.IndexByte([]byte(" \t\r\n,"), data[off]) >= 0 {
				off++
			}
			lines = append(lines, 1+bytes.Count(data[:off], []byte("\n")))
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
		}
		return lines
	}
	return nil
}

// atLine is " (line N)" for entry i when its line is known.
func atLine(lines []int, i int) string {
	if i < len(lines) {
		return fmt.Sprintf(" (line %d)", lines[i])
	}
	return ""
}
