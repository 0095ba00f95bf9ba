package main

import (
	"sort"
	"time"
)

// row is one line of the table.
type row struct {
	Name     string    `json:"name"`
	Count    int       `json:"count"`
	Errors   int       `json:"errors"`
	P50      float64   `json:"p50Ms"`
	P95      float64   `json:"p95Ms"`
	Max      float64   `json:"maxMs"`
	Floor    string    `json:"floor,omitempty"`
	Ratio    float64   `json:"ratioP50,omitempty"`
	RatioP95 float64   `json:"ratioP95,omitempty"`
	Samples  []float64 `json:"-"`
}

type report struct {
	Machine string            `json:"machine"`
	Date    string            `json:"date"`
	Rows    []*row            `json:"rows"`
	Memory  map[string]string `json:"memory"`
	Costs   map[string]string `json:"costs"`
	Notes   []string          `json:"notes"`
	// Hostile is the soak's hostile-neighbour phase (hostile.go).
	Hostile *hostileReport `json:"hostile,omitempty"`
}

func summarize(name string, samples []time.Duration, errs int) *row {
	ms := make([]float64, len(samples))
	for i, s := range samples {
		ms[i] = float64(s.Microseconds()) / 1000
	}
	return summarizeMs(name, ms, errs)
}

// pooled is one row of the samples and errors of rows measured apart
// (the rounds of one condition).
func pooled(name string, rows ...*row) *row {
	var ms []float64
	errs := 0
	for _, r := range rows {
		ms = append(ms, r.Samples...)
		errs += r.Errors
	}
	return summarizeMs(name, ms, errs)
}

// summarizeMs is the row of samples in ms, which it sorts.
func summarizeMs(name string, ms []float64, errs int) *row {
	r := &row{Name: name, Count: len(ms), Errors: errs}
	if len(ms) == 0 {
		return r
	}
	sort.Float64s(ms)
	r.Samples = ms
	r.P50 = pct(ms, 0.50)
	r.P95 = pct(ms, 0.95)
	r.Max = ms[len(ms)-1]
	return r
}

func pct(sorted []float64, p float64) float64 {
	i := int(float64(len(sorted)-1)*p + 0.5)
	return sorted[i]
}
