package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestAttackChildReportsTheAnswers: the attacks' process runs the plan it
// reads, says ready, and when its stdin closes stops and hands back every
// answer, counted, with the failures of answers its attack does not allow.
func TestAttackChildReportsTheAnswers(t *testing.T) {
	var bad, seen atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		seen.Add(1)
		if r.URL.Query().Get("path") == "/dev/urandom" {
			bad.Add(1)
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"code":"INTERNAL_ERROR","message":"x"}}`)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"code":"FILE_NOT_REGULAR","message":"x"}}`)
	}))
	defer srv.Close()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- runAttackChild(inR, outW); outW.Close() }()
	plan, _ := json.Marshal(attackPlan{Base: srv.URL, Files: "sbx-1", On: map[string]bool{"device": true}, Concurrency: 2})
	if _, err := inW.Write(append(plan, '\n')); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(outR)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the attacks' process said %q, %v", line, err)
	}
	// Stopped once both kinds of answer were given: the requests in
	// flight then are counted too.
	for bad.Load() == 0 || seen.Load() < 4 {
		time.Sleep(time.Millisecond)
	}
	inW.Close()
	var res attackResult
	if err := json.NewDecoder(out).Decode(&res); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(res.Stats) != 1 || res.Stats[0].Name != atkDevice {
		t.Fatalf("stats %+v, want the device attack's alone", res.Stats)
	}
	s := res.Stats[0]
	if s.ByStatus["400 FILE_NOT_REGULAR"] == 0 || s.ByStatus["500 INTERNAL_ERROR"] == 0 {
		t.Errorf("answers by status %v, want both the 400s and the 500s counted", s.ByStatus)
	}
	if s.Failures != s.ByStatus["500 INTERNAL_ERROR"] || len(res.Failed) == 0 {
		t.Errorf("failures %d (listed %d) for %d answers of 500", s.Failures, len(res.Failed), s.ByStatus["500 INTERNAL_ERROR"])
	}
}
