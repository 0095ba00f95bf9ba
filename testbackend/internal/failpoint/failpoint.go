// Package failpoint kills the backend at a named point of its work, so a
// crash test can stop it exactly where a power cut or an OOM kill could:
// between a record written and a container started, between a record
// removed and its container removed, and so on. In the style of etcd's
// gofail, but without code generation: Hit is a call at each point.
//
// Built without the tag "failpoints" (every build but the crash test's),
// Hit does nothing and costs nothing. Built with it, Hit ends the process
// with SIGKILL when the environment variable RARECLOUD_FAILPOINT names its
// point: "create.recorded" on the first hit, "create.recorded:3" on the
// third.
package failpoint

// Env is the environment variable that arms one point.
const Env = "RARECLOUD_FAILPOINT"

// Point names one place in the backend's work.
type Point string

// The points, in the order a sandbox's life passes them.
const (
	// StoreSynced: a record's new content is in its temporary file, synced,
	// not yet renamed over the old one.
	StoreSynced Point = "store.synced"
	// CreateRecorded: a new sandbox's record is on disk, pending; the
	// create has not answered.
	CreateRecorded Point = "create.recorded"
	// ClaimRecorded: a new sandbox's record is on disk, running in the
	// warm container it claimed; the create has not answered.
	ClaimRecorded Point = "claim.recorded"
	// EgressApplied: a restricted sandbox's rules are in the kernel, its
	// address not yet in its record.
	EgressApplied Point = "egress.applied"
	// StartContainer: the sandbox's container runs; its record still says
	// pending.
	StartContainer Point = "start.container"
	// StartRecorded: the record says running, on disk; the API does not
	// say so yet.
	StartRecorded Point = "start.recorded"
	// StartAnswered: the API says running (the lock is released, waiters
	// woken); nothing more of the start is left to do but watching.
	StartAnswered Point = "start.answered"
	// PatchRecorded: a PATCH's change is on disk; it has not answered.
	PatchRecorded Point = "patch.recorded"
	// FileWritten: a file is written in the sandbox; the PUT has not
	// answered.
	FileWritten Point = "file.written"
	// ExecRecorded: a command's Idempotency-Key is on disk; its process
	// has not started.
	ExecRecorded Point = "exec.recorded"
	// ExecRan: a keyed command's process ended; its answer is neither on
	// disk nor sent.
	ExecRan Point = "exec.ran"
	// DeleteRecorded: a deleted sandbox's record is gone from disk; its
	// container is not removed yet and the DELETE has not answered.
	DeleteRecorded Point = "delete.recorded"
)

// All is every point, for tests that visit each.
var All = []Point{StoreSynced, CreateRecorded, ClaimRecorded, EgressApplied, StartContainer, StartRecorded, StartAnswered, PatchRecorded, FileWritten, ExecRecorded, ExecRan, DeleteRecorded}
