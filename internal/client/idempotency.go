package client

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
)

// NewIdempotencyKey returns a fresh random Idempotency-Key.
func NewIdempotencyKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms.
		panic(errors.New("client: no randomness: " + err.Error()))
	}
	return "tf-" + hex.EncodeToString(b[:])
}

func validIdempotencyKey(key string) error {
	if len(key) < 1 || len(key) > 255 {
		return fmt.Errorf("idempotency key must be 1 to 255 characters, got %d", len(key))
	}
	for _, r := range key {
		if r < 0x20 || r > 0x7e {
			return fmt.Errorf("idempotency key must be printable ASCII")
		}
	}
	return nil
}
