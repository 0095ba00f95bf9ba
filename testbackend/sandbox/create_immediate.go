package sandbox

import (
	"context"
	"errors"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// startImmediate starts a new sandbox on a runtime that runs nothing
// (container.Immediate, the test mode's) before its record is first
// written, so the create answers with it running, or in run mode exited
// as its program did, and no one ever sees it pending. Nothing in it could
// send a packet: it gets no egress rules. The record is not shared yet, so
// no lock is held.
func (m *Manager) startImmediate(ctx context.Context, sb *store.Sandbox) error {
	cid, err := m.rt.Start(ctx, m.specFor(sb))
	if err != nil {
		return m.mapRuntimeErr(sb.ID, err)
	}
	// The container holds the environment now: the values leave the record.
	sb.Status, sb.ContainerID, sb.Env = StatusRunning, cid, nil
	m.startIdleClockLocked(sb, sb.CreatedAt)
	if !sb.RunMode {
		return nil
	}
	exit := m.rt.Wait(ctx, cid)
	logs, lerr := m.rt.Logs(ctx, cid, MaxLogBytes, nil)
	if err := errors.Join(exit.Err, lerr, m.rt.Remove(ctx, cid)); err != nil {
		_ = m.rt.Remove(ctx, cid)
		return m.mapRuntimeErr(sb.ID, err)
	}
	code, ended := exit.Code, sb.CreatedAt
	// The output goes to the log file before the record is first written
	// (if the record never is, the next start removes the file as an
	// orphan, lifecycle.go).
	sb.Status, sb.ExitCode, sb.EndedAt, sb.LogBytes, sb.ContainerID = StatusExited, &code, &ended, m.saveLogs(sb.ID, logs), ""
	return nil
}
