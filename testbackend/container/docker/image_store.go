package docker

import (
	"context"
	"sort"
	"strings"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
)

// The images this backend pulled stay on the engine while their sizes add
// up to no more than the budget (ImageBudgetBytes). Past it, after each
// pull, the least recently used of them that no container uses go, until
// the rest fit. Only images this runtime pulled are ever removed, only by
// the references it pulled them as (an image that also carries another
// tag keeps it), never one carrying a template's tag (rarecloud/sandbox-*),
// never one a container uses, and never one handed out for a start in the
// last imageHold. The set lives in memory: after a restart the images
// pulled before are the engine's, not counted, not removed.

// templateRepoPrefix names the template images, which are never removed.
const templateRepoPrefix = "rarecloud/sandbox-"

// imageHold keeps an image ensured for a start from being collected
// before the start creates its container.
const imageHold = 10 * time.Minute

// pulled is one image this runtime pulled.
type pulled struct {
	ref       string // the reference asked for, the image's only tag this runtime made
	id        string
	size      int64
	lastUsed  time.Time
	heldUntil time.Time
}

// touchImage marks ref used now, and held for a start.
func (d *Runtime) touchImage(ref string) {
	d.imgMu.Lock()
	defer d.imgMu.Unlock()
	if p := d.pulled[ref]; p != nil {
		p.lastUsed = time.Now()
		p.heldUntil = p.lastUsed.Add(d.imageHold)
	}
}

// startedFrom ends ref's hold: a container uses the image now.
func (d *Runtime) startedFrom(ref string) {
	d.imgMu.Lock()
	defer d.imgMu.Unlock()
	if p := d.pulled[ref]; p != nil {
		p.lastUsed = time.Now()
		p.heldUntil = time.Time{}
	}
}

func (d *Runtime) pulledImage(ref string, img image.InspectResponse) {
	d.imgMu.Lock()
	defer d.imgMu.Unlock()
	now := time.Now()
	d.pulled[ref] = &pulled{ref: ref, id: img.ID, size: img.Size, lastUsed: now, heldUntil: now.Add(d.imageHold)}
}

// removeRefs untags refs; the engine deletes the image with its last tag.
// Never forced: an image a container uses stays.
func (d *Runtime) removeRefs(refs ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, r := range refs {
		_, _ = d.cli.ImageRemove(ctx, r, image.RemoveOptions{PruneChildren: true})
	}
}

// collectImages removes unused pulled images, least recently used first,
// while they add up to more than the budget; keep (just pulled) stays.
func (d *Runtime) collectImages(ctx context.Context, keep string) {
	d.imgMu.Lock()
	list := make([]*pulled, 0, len(d.pulled))
	for _, p := range d.pulled {
		cp := *p
		list = append(list, &cp)
	}
	d.imgMu.Unlock()

	// What is still there, and under which tags.
	var total int64
	counted := map[string]bool{}
	tags := map[string][]string{}
	var live []*pulled
	for _, p := range list {
		img, err := d.cli.ImageInspect(ctx, p.ref)
		if err != nil || img.ID != p.id {
			d.forgetPulled(p.ref, p.id)
			continue
		}
		tags[p.id] = img.RepoTags
		if isTemplate(img.RepoTags) {
			continue
		}
		if !counted[p.id] {
			counted[p.id] = true
			total += p.size
		}
		live = append(live, p)
	}
	if total <= d.imageBudget {
		return
	}
	used := map[string]bool{}
	cs, err := d.cli.ContainerList(ctx, dockercontainer.ListOptions{All: true})
	if err != nil {
		return // cannot tell what is used: remove nothing
	}
	for _, c := range cs {
		used[c.ImageID] = true
	}
	sort.Slice(live, func(i, j int) bool { return live[i].lastUsed.Before(live[j].lastUsed) })
	now := time.Now()
	for _, p := range live {
		if total <= d.imageBudget {
			return
		}
		if p.ref == keep || used[p.id] || now.Before(p.heldUntil) {
			continue
		}
		d.removeRefs(p.ref)
		d.forgetPulled(p.ref, p.id)
		if _, err := d.cli.ImageInspect(ctx, p.id); err != nil && counted[p.id] {
			total -= p.size
			delete(counted, p.id)
		}
	}
}

func (d *Runtime) forgetPulled(ref, id string) {
	d.imgMu.Lock()
	defer d.imgMu.Unlock()
	if p := d.pulled[ref]; p != nil && p.id == id {
		delete(d.pulled, ref)
	}
}

func isTemplate(repoTags []string) bool {
	for _, t := range repoTags {
		if strings.HasPrefix(t, templateRepoPrefix) {
			return true
		}
	}
	return false
}
