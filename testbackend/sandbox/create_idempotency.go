package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// idemEntry is a key in flight or done. Done entries hold either the
// sandbox id or the client error the first request got.
type idemEntry struct {
	rec    store.Idempotency
	done   bool
	expiry *time.Timer // forgets the key after IdempotencyTTL
}

// MaxIdempotencyKeyLen bounds the Idempotency-Key header.
const MaxIdempotencyKeyLen = 255

// ValidateIdempotencyKey checks the header: 1 to 255 printable ASCII.
func ValidateIdempotencyKey(key string) *Error {
	if len(key) == 0 || len(key) > MaxIdempotencyKeyLen {
		return errorf(CodeInvalidIdempotencyKey, "Idempotency-Key must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return errorf(CodeInvalidIdempotencyKey, "Idempotency-Key must be 1 to %d printable ASCII characters", MaxIdempotencyKeyLen)
		}
	}
	return nil
}

// createIdempotent is a validated create with an Idempotency-Key: a key
// seen before replays its first answer (or refuses a different body, or
// one still in progress); a new one is in progress while create runs,
// then settled with its answer, or released after a transient failure.
func (m *Manager) createIdempotent(ctx context.Context, account, idemKey string, tpl Template, req CreateRequest) (CreateResult, error) {
	hash := requestHash(req)
	mapKey := account + "\x00" + idemKey

	m.mu.Lock()
	if e := m.idem[mapKey]; e != nil {
		defer m.mu.Unlock()
		switch {
		case e.rec.RequestHash != hash:
			return CreateResult{}, errorf(CodeIdempotencyKeyReused, "Idempotency-Key %q was used with a different request body; use a new key for a different request", idemKey)
		case !e.done:
			return CreateResult{}, &Error{Code: CodeIdempotencyInProgress, Message: "a request with this Idempotency-Key is still in progress; retry shortly", RetryAfter: 1}
		case e.rec.SandboxID == "":
			var replay Error
			if err := json.Unmarshal(e.rec.Body, &replay); err != nil || replay.Code == "" {
				return CreateResult{}, errorf(CodeInternal, "stored answer of Idempotency-Key %q is unreadable", idemKey)
			}
			return CreateResult{Replayed: true}, &replay
		default:
			if sb := m.boxes[e.rec.SandboxID]; sb != nil {
				return CreateResult{Sandbox: view(sb), Replayed: true}, nil
			}
			var v View
			if err := json.Unmarshal(e.rec.Body, &v); err != nil {
				return CreateResult{}, errorf(CodeInternal, "stored answer of Idempotency-Key %q is unreadable", idemKey)
			}
			return CreateResult{Sandbox: v, Replayed: true}, nil
		}
	}
	entry := &idemEntry{rec: store.Idempotency{Account: account, Key: idemKey, RequestHash: hash, CreatedAt: time.Now().UTC()}}
	m.idem[mapKey] = entry
	m.mu.Unlock()

	res, err := m.create(ctx, account, tpl, req, &entry.rec)

	m.mu.Lock()
	var apiErr *Error
	switch {
	case err == nil:
		entry.rec.SandboxID = res.Sandbox.ID
		entry.rec.Status = 201
		entry.rec.Body, _ = encodeKept(res.Sandbox)
	case errors.As(err, &apiErr) && !retryable(apiErr.Code):
		// A client error spends the key: the same request would fail the
		// same way, and replaying it keeps the answer stable.
		entry.rec.Status = 400
		entry.rec.Body, _ = encodeKept(apiErr)
	default:
		// Transient failures release the key so a retry can succeed.
		delete(m.idem, mapKey)
		m.mu.Unlock()
		return res, err
	}
	w := m.putIdempotencyLocked(&entry.rec)
	entry.done = true
	m.scheduleIdemExpiryLocked(mapKey, entry)
	m.trackKeyLocked(mapKey, entry)
	m.mu.Unlock()
	// A failure is logged by the writer; the sandbox's record carries the
	// key too, so a restart still replays it.
	_ = w.wait()
	return res, err
}

func retryable(code string) bool {
	// A full account is transient too: a delete frees capacity at once.
	return code == CodeServiceUnavailable || code == CodeInternal || code == CodeTooManyRequests || code == CodeVCPULimitExceeded ||
		code == CodeHostShareExceeded || code == CodeHostCapacityExhausted
}

// MarshalJSON lets a stored client error be replayed as it was.
func (e *Error) MarshalJSON() ([]byte, error) {
	return encodeKept(struct {
		Code          string `json:"code"`
		Message       string `json:"message"`
		Unprocessable bool   `json:"unprocessable,omitempty"`
	}{e.Code, e.Message, e.Unprocessable})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (e *Error) UnmarshalJSON(b []byte) error {
	var w struct {
		Code          string `json:"code"`
		Message       string `json:"message"`
		Unprocessable bool   `json:"unprocessable"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	e.Code, e.Message, e.Unprocessable = w.Code, w.Message, w.Unprocessable
	return nil
}

func requestHash(req CreateRequest) string {
	b, _ := json.Marshal(req) // maps marshal with sorted keys: stable
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (m *Manager) scheduleIdemExpiryLocked(mapKey string, e *idemEntry) {
	wait := time.Until(e.rec.CreatedAt.Add(m.cfg.IdempotencyTTL))
	e.expiry = time.AfterFunc(max(wait, 0), func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.idem[mapKey] == e && !m.closing {
			delete(m.idem, mapKey)
			m.untrackKeyLocked(e.rec.Account, mapKey)
			m.deleteIdempotencyLocked(e.rec.Account, e.rec.Key)
		}
	})
}
