package sandbox

import (
	"context"
	"slices"
	"strings"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// reconcile makes records and containers agree: containers without a live
// record go; live records whose container is gone end; pending records
// whose start was cut short start again.
//
// The engine's list is a snapshot taken before the manager's lock: a
// sandbox that got its container after it (a start that finished, a warm
// container claimed) is missing from it, or shows a container that was
// not running yet. So a running sandbox is never ended on the first list
// alone: it is a suspect, judged again on a second list taken after the
// first judgement, and only if its record still names the same container.
func (m *Manager) reconcile(ctx context.Context) error {
	containers, err := m.rt.List(ctx)
	if err != nil {
		return err
	}
	seen := indexContainers(containers)
	m.mu.Lock()
	plan := m.judgeLocked(containers, seen)
	m.mu.Unlock()

	for _, id := range plan.remove {
		if err := m.rt.Remove(ctx, id); err != nil {
			return err
		}
		if sid := seen.byID[id].Labels[container.LabelSandboxID]; sid != "" {
			m.releaseEgress(sid)
		}
	}
	if err := m.judgeSuspects(ctx, plan.suspects, plan.poolSuspects); err != nil {
		return err
	}
	// Removal above must finish before a new container takes the name.
	m.mu.Lock()
	for _, sb := range plan.restart {
		if m.boxes[sb.ID] == sb && sb.Status == StatusPending {
			m.startAsyncLocked(sb)
		}
	}
	m.mu.Unlock()
	m.fillPools()
	return nil
}

// reconcilePlan is the first judgement of a reconcile: what goes, what
// starts again, and what the second list decides.
type reconcilePlan struct {
	remove       []string         // containers without a live record, or of a start cut short
	restart      []*store.Sandbox // pending records whose start was cut short
	suspects     []suspect        // running records whose container the list does not show running
	poolSuspects []string         // ready warm containers missing from the list
}

// judgeLocked judges records and warm pools on the engine's first list.
// Running sandboxes whose container it shows running are watched again.
func (m *Manager) judgeLocked(containers []container.Container, seen containerIndex) reconcilePlan {
	var plan reconcilePlan
	claimed := map[string]bool{}
	for _, sb := range m.boxes {
		if sb.ContainerID != "" {
			claimed[sb.ContainerID] = true
		}
	}
	for _, c := range containers {
		if tpl := c.Labels[container.LabelPool]; tpl != "" {
			// Warm containers: keep the claimed ones, the ones this pool
			// holds and still runs, and the ones being started.
			p := m.pools[tpl]
			if claimed[c.ID] || (p != nil && (p.names[strings.TrimPrefix(c.Name, "/")] || (c.Running && slices.Contains(p.ready, c.ID)))) {
				continue
			}
			plan.remove = append(plan.remove, c.ID)
			continue
		}
		sb := m.boxes[c.Labels[container.LabelSandboxID]]
		if sb == nil || sb.Status == StatusExited || sb.Status == StatusTerminated {
			plan.remove = append(plan.remove, c.ID)
		}
	}
	for _, p := range m.pools {
		// A ready container missing from the list may have become ready
		// after it: the second list decides. One listed as stopped goes
		// (it is in remove above).
		p.ready = slices.DeleteFunc(p.ready, func(id string) bool {
			c, ok := seen.byID[id]
			if !ok {
				plan.poolSuspects = append(plan.poolSuspects, id)
			}
			return ok && !c.Running
		})
	}
	for _, sb := range m.boxes {
		c, ok := seen.find(sb)
		switch sb.Status {
		case StatusPending:
			if m.starting[sb.ID] != nil {
				continue // its start is in flight
			}
			if ok {
				plan.remove = append(plan.remove, c.ID)
			}
			plan.restart = append(plan.restart, sb)
		case StatusRunning:
			if !ok || !c.Running {
				plan.suspects = append(plan.suspects, suspect{sb: sb, cid: sb.ContainerID})
				continue
			}
			m.adoptLocked(sb, c)
		}
	}
	return plan
}

// suspect is a running sandbox whose container the first list of a
// reconcile did not show running, with the container its record named then.
type suspect struct {
	sb  *store.Sandbox
	cid string
}

// containerIndex finds a list's containers by id and by name.
type containerIndex struct {
	byID, byName map[string]container.Container
}

func indexContainers(cs []container.Container) containerIndex {
	x := containerIndex{byID: map[string]container.Container{}, byName: map[string]container.Container{}}
	for _, c := range cs {
		x.byName[strings.TrimPrefix(c.Name, "/")] = c
		x.byID[c.ID] = c
	}
	return x
}

// find returns the sandbox's container: by the id its record holds, else
// by its name (a start cut short before the id was recorded).
func (x containerIndex) find(sb *store.Sandbox) (container.Container, bool) {
	if c, ok := x.byID[sb.ContainerID]; ok && sb.ContainerID != "" {
		return c, true
	}
	c, ok := x.byName[ContainerName(sb.ID)]
	return c, ok
}

// adoptLocked watches a running sandbox's live container, recording its
// id when the record did not have it.
func (m *Manager) adoptLocked(sb *store.Sandbox, c container.Container) {
	if sb.ContainerID != c.ID {
		sb.ContainerID = c.ID
		_ = m.persistLocked(sb)
	}
	m.watchLocked(sb)
}

// judgeSuspects takes a second list and ends the suspects whose container
// is really gone (container_lost, or engine_lost when the engine was away)
// or has exited (its exit is collected as the watcher would have). A
// suspect whose record changed meanwhile (deleted, ended, another
// container) is left to whoever changed it. Warm containers that the
// second list does not show leave the pool's ready list.
func (m *Manager) judgeSuspects(ctx context.Context, suspects []suspect, poolSuspects []string) error {
	if len(suspects) == 0 && len(poolSuspects) == 0 {
		return nil
	}
	containers, err := m.rt.List(ctx)
	if err != nil {
		return err
	}
	now := indexContainers(containers)
	m.engine.mu.Lock()
	engineLost := m.engine.down
	m.engine.mu.Unlock()

	type exit struct {
		id, cid string
		c       container.Container
	}
	var lost []string
	var collect []exit
	m.mu.Lock()
	for _, s := range suspects {
		sb := m.boxes[s.sb.ID]
		if sb != s.sb || sb.Status != StatusRunning || sb.ContainerID != s.cid || m.expiring[sb.ID] {
			continue
		}
		c, ok := now.find(sb)
		switch {
		case !ok:
			reason, msg := ReasonContainerLost, "the sandbox's container was killed or removed from outside the backend"
			if engineLost {
				reason, msg = ReasonEngineLost, "the sandbox's container went while the container engine at "+m.rt.Address()+" was unavailable (it restarted or crashed)"
			}
			m.endLocked(sb, StatusTerminated, nil, reason, msg, 0)
			lost = append(lost, sb.ID)
		case !c.Running:
			collect = append(collect, exit{id: sb.ID, cid: c.ID, c: c})
		default:
			m.adoptLocked(sb, c)
		}
	}
	for _, p := range m.pools {
		p.ready = slices.DeleteFunc(p.ready, func(id string) bool {
			_, ok := now.byID[id]
			return !ok && slices.Contains(poolSuspects, id)
		})
	}
	m.mu.Unlock()

	for _, id := range lost {
		m.releaseEgress(id)
	}
	for _, e := range collect {
		m.exited(e.id, e.cid, container.Exit{Code: e.c.ExitCode, EngineLost: engineLost})
	}
	return nil
}
