package store

import (
	"bytes"
	"encoding/json"
)

// Encode is the store's JSON, for every record it writes and for a record
// a caller encodes itself (PutSandboxEncoded): without the HTML escapes
// of json.Marshal, which turn each '<', '>' and '&' into six bytes, so
// that a create body or a command's output full of them is not kept at
// six times its size. Readers decode either form alike.
func Encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
