package main

import (
	"fmt"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/hostcpu"
)

// cpuCost adds up the host's busy CPU time of one kind of operation.
type cpuCost struct {
	total time.Duration
	n     int
}

// measure runs f and adds the host's busy CPU time while it ran.
func (c *cpuCost) measure(f func() error) error {
	b := hostcpu.Busy()
	err := f()
	c.total += hostcpu.Busy() - b
	c.n++
	return err
}

func (c *cpuCost) per() time.Duration {
	if c.n == 0 {
		return 0
	}
	return c.total / time.Duration(c.n)
}

func (c *cpuCost) String() string {
	return fmt.Sprintf("%.0f ms (%d samples)", float64(c.per().Microseconds())/1000, c.n)
}

// capacityNote says how much of the host's CPU a steady rate of sandboxes
// needs on the floor alone: each a start, two execs and a remove.
func capacityNote(start, exec, remove time.Duration, rate float64, cpus int) string {
	need := float64(start+2*exec+remove) * rate / float64(time.Second)
	return fmt.Sprintf("%.0f%% of this host's %d CPUs at %g sandboxes/s (a start, two execs and a remove each, floor costs alone)", 100*need/float64(cpus), cpus, rate)
}

// warmCost says what a steady row cost the host: busy CPU time per sandbox
// (total over n), and the share of the host's CPUs busy during the row
// (busy over wall).
func warmCost(total time.Duration, n int, busy, wall time.Duration, cpus int) string {
	if n <= 0 || wall <= 0 || cpus <= 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.0f ms per sandbox; %.0f%% of this host's %d CPUs busy during the row",
		float64(total.Milliseconds())/float64(n), 100*busy.Seconds()/wall.Seconds()/float64(cpus), cpus)
}
