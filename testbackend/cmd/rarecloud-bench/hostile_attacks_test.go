package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/attacks"
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

// TestFloodEndsWithTheAttacks: the DNS flood, which runs in its sandbox,
// is started with its process id kept and its mark removed, and stopping
// the attacks kills it and waits for it to end; a kill that fails is a
// failure of the attack, so that a round's quiet run never runs beside a
// flood left behind.
func TestFloodEndsWithTheAttacks(t *testing.T) {
	for _, killExit := range []int{0, 1} {
		var mu sync.Mutex
		var cmds []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body struct {
				Cmd string `json:"cmd"`
			}
			_ = json.NewDecoder(r.Body).Decode(&body)
			mu.Lock()
			cmds = append(cmds, body.Cmd)
			mu.Unlock()
			exit := 0
			if strings.HasPrefix(body.Cmd, "p=$(cat ") {
				exit = killExit
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"data":{"exitCode":%d,"stdout":"","stderr":""}}`, exit)
		}))
		a := startAttacks(attackPlan{Base: srv.URL, Files: "sbx-1", Flooder: "sbx-f", On: map[string]bool{"dns": true}, Concurrency: 1})
		res, _ := a.stop()
		srv.Close()
		if len(cmds) < 3 {
			t.Fatalf("commands %q: want the start, the check and the kill", cmds)
		}
		start, kill := cmds[0], cmds[len(cmds)-1]
		if !strings.HasPrefix(start, "rm -f "+attacks.DNSFloodMark+";") || !strings.HasSuffix(start, "& echo $! > "+floodPIDFile) {
			t.Errorf("the flood started as %q: want its mark removed first and its process id kept", start)
		}
		if want := "p=$(cat " + floodPIDFile + ") && kill $p && while kill -0 $p"; !strings.HasPrefix(kill, want) {
			t.Errorf("the last command %q, want the flood killed and waited for", kill)
		}
		if failed := len(res.Failed) > 0; failed != (killExit != 0) {
			t.Errorf("kill exiting %d: failures %q", killExit, res.Failed)
		}
	}
}
