package docker

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
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
//
// A held image is outside the budget's reach, so the holds are bounded
// where pulls start (storeRoomLocked): a pull starts only while the held
// images plus one image of the largest size (maxImageBytes) for each pull
// under way fit in the budget. The store therefore holds at most the
// budget plus one largest image of images the collector may not remove
// for their hold, however fast one account pulls distinct images. A hold
// ends at once when a container is created from the image (startedFrom).
// And one account may not fill it for the others: an account whose held
// images (those its pulls brought) take half the budget starts no new
// pull until one of its holds ends (a create that pulls and is deleted
// before its start keeps its image held), so the other half is always
// there for the other accounts' pulls.

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
	account   string // whose pull brought it, or ""
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

// storeFullRetry is the Retry-After of a store full while no hold would
// end in time to make room: the pulls under way take the room.
const storeFullRetry = 30 * time.Second

// storeRoomLocked refuses a pull of ref while the images held now plus one
// largest image for each pull under way do not fit in the budget. The
// refusal says when enough holds end to make room.
func (d *Runtime) storeRoomLocked(ref, account string) error {
	now := time.Now()
	if err := d.accountRoomLocked(ref, account, now); err != nil {
		return err
	}
	holds := map[string]time.Time{} // by image id: two references of one image count once
	sizes := map[string]int64{}
	var held int64
	for _, p := range d.pulled {
		if !now.Before(p.heldUntil) {
			continue
		}
		if _, ok := holds[p.id]; !ok {
			held += p.size
			sizes[p.id] = p.size
		}
		if p.heldUntil.After(holds[p.id]) {
			holds[p.id] = p.heldUntil
		}
	}
	reserved := d.maxImageBytes * int64(d.gate.active)
	if held+reserved <= d.imageBudget {
		return nil
	}
	ids := make([]string, 0, len(holds))
	for id := range holds {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return holds[ids[i]].Before(holds[ids[j]]) })
	retry := storeFullRetry
	left := held
	for _, id := range ids {
		left -= sizes[id]
		if left+reserved <= d.imageBudget {
			retry = holds[id].Sub(now)
			break
		}
	}
	secs := max(int((retry+time.Second-1)/time.Second), 1)
	return &container.PullLaterError{Image: ref, RetryAfter: time.Duration(secs) * time.Second, Msg: fmt.Sprintf(
		"retry image %q in %d s: the backend's image store is full of images pulled or asked for in the last %d minutes that no sandbox has started from yet (%d MiB held, %d pulls under way, budget %d MiB); images already on the backend can still be used",
		ref, secs, int(d.imageHold/time.Minute), held>>20, d.gate.active, d.imageBudget>>20)}
}

// accountRoomLocked refuses a new pull of account's while the images its
// pulls brought, still held, take half the image budget: the account's
// own doing, so 429 with Retry-After until its earliest hold ends.
func (d *Runtime) accountRoomLocked(ref, account string, now time.Time) error {
	if account == "" {
		return nil
	}
	var held int64
	var first time.Time
	for _, p := range d.pulled {
		if p.account != account || !now.Before(p.heldUntil) {
			continue
		}
		held += p.size
		if first.IsZero() || p.heldUntil.Before(first) {
			first = p.heldUntil
		}
	}
	if held < d.imageBudget/2 {
		return nil
	}
	secs := max(int((first.Sub(now)+time.Second-1)/time.Second), 1)
	return &container.PullLaterError{Image: ref, PerAccount: true, RetryAfter: time.Duration(secs) * time.Second, Msg: fmt.Sprintf(
		"retry image %q in %d s: images this account pulled in the last %d minutes that no sandbox has started from yet take half of the backend's image store (%d MiB of %d MiB); start sandboxes from them, or wait for their hold to end",
		ref, secs, int(d.imageHold/time.Minute), held>>20, d.imageBudget>>20)}
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
