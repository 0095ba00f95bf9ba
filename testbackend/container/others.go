package container

import (
	"context"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
)

// OtherInstances lists the owned containers of every instance but this
// one, by instance id: what a reaper looks at. Only containers carrying
// LabelManaged and a LabelInstance are listed.
func (d *Docker) OtherInstances(ctx context.Context) (map[string][]string, error) {
	cs, err := d.cli.ContainerList(ctx, dockercontainer.ListOptions{
		All:     true,
		Filters: filters.NewArgs(filters.Arg("label", LabelManaged+"=true")),
	})
	if err != nil {
		return nil, d.engineErr("list containers", err)
	}
	out := map[string][]string{}
	for _, c := range cs {
		inst := c.Labels[LabelInstance]
		if inst == "" || inst == d.instance {
			continue
		}
		out[inst] = append(out[inst], c.ID)
	}
	return out, nil
}
