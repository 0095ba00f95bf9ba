package docker

import (
	"context"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Owned is a container of another backend instance, as a reaper sees it.
type Owned struct {
	ID string
	// Pool: it was started for a warm pool (it may have been claimed by a
	// sandbox since; only that backend's records tell).
	Pool bool
}

// OtherInstances lists the owned containers of every instance but this
// one, by instance id: what a reaper looks at. Only containers carrying
// LabelManaged and a LabelInstance are listed.
func (d *Runtime) OtherInstances(ctx context.Context) (map[string][]Owned, error) {
	cs, err := d.cli.ContainerList(ctx, dockercontainer.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", container.LabelManaged+"=true")),
	})
	if err != nil {
		return nil, d.engineErr("list containers", err)
	}
	out := map[string][]Owned{}
	for _, c := range cs {
		inst := c.Labels[container.LabelInstance]
		if inst == "" || inst == d.instance {
			continue
		}
		_, pool := c.Labels[container.LabelPool]
		out[inst] = append(out[inst], Owned{ID: c.ID, Pool: pool})
	}
	return out, nil
}
