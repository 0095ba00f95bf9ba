package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

func (s *Server) templates(w http.ResponseWriter, _ *http.Request, _ *call) {
	s.writeData(w, http.StatusOK, s.mgr.Templates())
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, c *call) {
	filter := map[string]string{}
	for _, l := range r.URL.Query()["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			s.writeErr(w, apiErr(CodeInvalidLabelQuery, "label filter %q must be key=value", l))
			return
		}
		if prev, dup := filter[k]; dup && prev != v {
			// Two values for one key can never both match.
			s.writeData(w, http.StatusOK, []sandbox.View{})
			return
		}
		filter[k] = v
	}
	if err := sandbox.ValidateLabels(filter); err != nil {
		s.writeErr(w, &sandbox.Error{Code: CodeInvalidLabelQuery, Message: err.Message})
		return
	}
	s.writeData(w, http.StatusOK, s.mgr.List(c.account, filter))
}

// idempotencyKey is the request's Idempotency-Key, "" when it has none;
// a key that is there must be valid.
func idempotencyKey(r *http.Request) (string, error) {
	key := r.Header.Get("Idempotency-Key")
	if _, present := r.Header["Idempotency-Key"]; present {
		if err := sandbox.ValidateIdempotencyKey(key); err != nil {
			return "", err
		}
	}
	return key, nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, c *call) {
	key, err := idempotencyKey(r)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	var req sandbox.CreateRequest
	if err := s.decode(w, r, c.account, &req); err != nil {
		s.writeErr(w, err)
		return
	}
	res, err := s.mgr.Create(r.Context(), c.account, key, req)
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if err != nil {
		s.writeErr(w, err)
		return
	}
	w.Header().Set("Location", "/v1/sandboxes/"+res.Sandbox.ID)
	s.writeData(w, http.StatusCreated, res.Sandbox)
}

// MaxWaitMs bounds how long GET /sandboxes/{id}?waitFor= may wait, in milliseconds.
const MaxWaitMs = 60_000

func (s *Server) get(w http.ResponseWriter, r *http.Request, c *call) {
	q := r.URL.Query()
	if waitFor := q.Get("waitFor"); waitFor != "" {
		s.waitFor(w, r, c, waitFor, q.Get("timeoutMs"))
		return
	}
	v, err := s.mgr.Get(c.account, c.id)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	s.writeData(w, http.StatusOK, v)
}

// waitFor answers GET /sandboxes/{id}?waitFor=running[,exited…]&timeoutMs=N
// once the sandbox has one of the statuses, has ended, or the time is up:
// a client learns of a change when it happens instead of polling for it.
func (s *Server) waitFor(w http.ResponseWriter, r *http.Request, c *call, waitFor, timeout string) {
	var want []string
	for _, st := range strings.Split(waitFor, ",") {
		switch st {
		case sandbox.StatusPending, sandbox.StatusRunning, sandbox.StatusExited, sandbox.StatusTerminated:
			want = append(want, st)
		default:
			s.writeErr(w, apiErr(sandbox.CodeInvalidRequest, "waitFor takes statuses from pending, running, exited and terminated, comma-separated; got %q", st))
			return
		}
	}
	ms := int64(30_000)
	if timeout != "" {
		v, err := strconv.ParseInt(timeout, 10, 64)
		if err != nil || v < 1 || v > MaxWaitMs {
			s.writeErr(w, apiErr(sandbox.CodeInvalidTimeout, "timeoutMs of a wait must be 1 to %d, got %q", MaxWaitMs, timeout))
			return
		}
		ms = v
	}
	// Waiting is no work: the slot goes back to the account's line while
	// this waits (so long polls cannot stall the line; admission.go), and
	// the account's waits are bounded in number instead.
	c.releaseSlot()
	if !s.admit.startPoll(c.account) {
		w.Header().Set("Retry-After", "1")
		s.writeErr(w, apiErr(sandbox.CodeTooManyRequests, "too many waits for this account (at most %d at once); retry after a second", s.admit.maxPolls))
		return
	}
	defer s.admit.endPoll(c.account)
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(ms)*time.Millisecond)
	defer cancel()
	v, err := s.mgr.WaitStatus(ctx, c.account, c.id, want)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	s.writeData(w, http.StatusOK, v)
}

// update is PATCH /sandboxes/{id} (an extension of v1): timeoutMs and
// idleTimeoutMs of a running sandbox. A body that is not one JSON object
// of those fields is INVALID_REQUEST, whatever is wrong with it; a number
// too long to be read is a bad value of its field (INVALID_TIMEOUT).
func (s *Server) update(w http.ResponseWriter, r *http.Request, c *call) {
	var req sandbox.UpdateRequest
	if err := s.decode(w, r, c.account, &req); err != nil {
		var e *sandbox.Error
		if errors.As(err, &e) && e.Code != sandbox.CodePayloadTooLarge && e.Code != sandbox.CodeInvalidTimeout {
			err = apiErr(sandbox.CodeInvalidRequest, "%s; send a JSON object with timeoutMs, idleTimeoutMs or both", e.Message)
		}
		s.writeErr(w, err)
		return
	}
	v, err := s.mgr.Update(c.account, c.id, req)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	s.writeData(w, http.StatusOK, v)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request, c *call) {
	if err := s.mgr.Delete(r.Context(), c.account, c.id); err != nil {
		s.writeErr(w, err)
		return
	}
	s.writeData(w, http.StatusOK, map[string]any{"id": c.id, "deleted": true})
}

type runCodeRequest struct {
	Language  string `json:"language"`
	Code      string `json:"code"`
	TimeoutMs *int64 `json:"timeoutMs,omitempty"`
}

// runCode and command take an Idempotency-Key (exec idempotency, an
// extension of v1): a replayed answer, error or not, says so in
// Idempotent-Replayed.
func (s *Server) runCode(w http.ResponseWriter, r *http.Request, c *call) {
	key, err := idempotencyKey(r)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	var req runCodeRequest
	if err := s.decode(w, r, c.account, &req); err != nil {
		s.writeErr(w, err)
		return
	}
	out, replayed, err := s.mgr.RunCodeWithKey(r.Context(), c.account, c.id, key, req.Language, req.Code, req.TimeoutMs)
	s.writeExec(w, out, replayed, err)
}

func (s *Server) writeExec(w http.ResponseWriter, out sandbox.ExecOutput, replayed bool, err error) {
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if err != nil {
		s.writeErr(w, err)
		return
	}
	s.writeData(w, http.StatusOK, out)
}

type commandRequest struct {
	Cmd       string `json:"cmd"`
	TimeoutMs *int64 `json:"timeoutMs,omitempty"`
}

func (s *Server) command(w http.ResponseWriter, r *http.Request, c *call) {
	key, err := idempotencyKey(r)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	var req commandRequest
	if err := s.decode(w, r, c.account, &req); err != nil {
		s.writeErr(w, err)
		return
	}
	out, replayed, err := s.mgr.CommandWithKey(r.Context(), c.account, c.id, key, req.Cmd, req.TimeoutMs)
	s.writeExec(w, out, replayed, err)
}

type fileBody struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, c *call) {
	var req fileBody
	if err := s.decode(w, r, c.account, &req); err != nil {
		s.writeErr(w, err)
		return
	}
	if err := s.mgr.WriteFile(r.Context(), c.account, c.id, req.Path, req.Content); err != nil {
		s.writeErr(w, err)
		return
	}
	s.writeData(w, http.StatusOK, map[string]any{"path": req.Path, "size": len(req.Content)})
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, c *call) {
	path := r.URL.Query().Get("path")
	content, err := s.mgr.ReadFile(r.Context(), c.account, c.id, path)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	s.writeData(w, http.StatusOK, fileBody{Path: path, Content: content})
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request, c *call) {
	logs, err := s.mgr.Logs(r.Context(), c.account, c.id)
	if err != nil {
		s.writeErr(w, err)
		return
	}
	s.writeData(w, http.StatusOK, map[string]string{"logs": logs})
}

// expose answers as the product does: preview URLs do not exist yet. The
// sandbox must still be the caller's, so the answer leaks nothing.
func (s *Server) expose(w http.ResponseWriter, _ *http.Request, c *call) {
	if _, err := s.mgr.Get(c.account, c.id); err != nil {
		s.writeErr(w, err)
		return
	}
	if p, err := strconv.Atoi(c.port); err != nil || p < 1 || p > 65535 {
		s.writeErr(w, apiErr(sandbox.CodeInvalidRequest, "port must be a number from 1 to 65535, got %q", c.port))
		return
	}
	s.writeErr(w, apiErr(CodeNotImplemented, "preview URLs are not available: a sandbox accepts no inbound connections; read results with run_code, commands, logs or files"))
}
