package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

func machine() string {
	cpu := "unknown cpu"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(data), "\n", 2)[0])[1]
		if kb, err := strconv.Atoi(mem); err == nil {
			mem = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d vCPU (%s), %s RAM, Linux %s, %s", runtime.NumCPU(), cpu, mem, strings.TrimSpace(string(kernel)), runtime.Version())
}

func writeReport(rep *report, dir string) error { return writeReportAs(rep, dir, "results") }

// writeReportAs prints the report and writes it as <base>.md and
// <base>.json into dir.
func writeReportAs(rep *report, dir, base string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Machine: %s\nDate: %s\n\n", rep.Machine, rep.Date)
	fmt.Fprintf(&b, "| operation | count | errors | p50 ms | p95 ms | max ms | ratio p50 / p95 to |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rep.Rows {
		ratio := ""
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f× / %.2f× %s", r.Ratio, r.RatioP95, r.Floor)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f | %.1f | %.1f | %s |\n", r.Name, r.Count, r.Errors, r.P50, r.P95, r.Max, ratio)
	}
	keys := make([]string, 0, len(rep.Memory))
	for k := range rep.Memory {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.WriteString("\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %s\n", k, rep.Memory[k])
	}
	keys = keys[:0]
	for k := range rep.Costs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %s\n", k, rep.Costs[k])
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	if rep.Hostile != nil {
		b.WriteString(rep.Hostile.markdown())
	}
	fmt.Print(b.String())
	if err := os.WriteFile(filepath.Join(dir, base+".md"), b.Bytes(), 0o644); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, base+".json"), data, 0o644)
}
