package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	rt "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/runtime"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

var floorOrder = []string{
	"floor: container create+start (runsc)",
	"floor: exec echo hi",
	"floor: create+start, then exec echo",
	"floor: exec python3 -c print",
	"floor: exec node -e",
	"floor: container remove",
}

// measureFloor does the work with the Docker API alone: no HTTP, no
// records, the same runtime settings.
func measureFloor(ctx context.Context, o options) (map[string]*row, error) {
	d, err := rt.NewDocker(rt.DockerOptions{Instance: fmt.Sprintf("bench-floor-%d", os.Getpid()), PullPolicy: "never", Agent: rt.AgentNone})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	spec := func(image string) rt.Spec {
		return rt.Spec{Name: "rarecloud-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36), Image: image, NanoCPUs: 1e9, MemoryBytes: 1 << 30, HomeBytes: 2 << 30, TmpBytes: 1 << 30, MaxProcs: 512}
	}
	out := map[string]*row{}
	var starts, removes, firsts []time.Duration
	errs := 0
	for i := 0; i < o.n/2; i++ {
		t0 := time.Now()
		id, err := d.Start(ctx, spec(sandbox.ImageBase))
		if err != nil {
			errs++
			continue
		}
		starts = append(starts, time.Since(t0))
		if _, err := d.Exec(ctx, id, rt.ExecRequest{Cmd: []string{"echo", "hi"}, MaxOutput: 1 << 20}); err != nil {
			errs++
		}
		firsts = append(firsts, time.Since(t0))
		t1 := time.Now()
		_ = d.Remove(ctx, id)
		removes = append(removes, time.Since(t1))
	}
	out[floorOrder[0]] = summarize(floorOrder[0], starts, errs)
	out[floorOrder[2]] = summarize(floorOrder[2], firsts, errs)
	out[floorOrder[5]] = summarize(floorOrder[5], removes, 0)
	for _, c := range []struct {
		image, name string
		argv        []string
		n           int
	}{
		{sandbox.ImageBase, floorOrder[1], []string{"echo", "hi"}, o.n * 5},
		{sandbox.ImagePython, floorOrder[3], []string{"python3", "-c", "print('hi')"}, o.n},
		{sandbox.ImageNode, floorOrder[4], []string{"node", "-e", "console.log('hi')"}, o.n / 2},
	} {
		id, err := d.Start(ctx, spec(c.image))
		if err != nil {
			return nil, err
		}
		out[c.name] = repeat(c.n, func() error {
			_, err := d.Exec(ctx, id, rt.ExecRequest{Cmd: c.argv, Timeout: time.Minute, MaxOutput: 1 << 20})
			return err
		}, c.name)
		_ = d.Remove(ctx, id)
	}
	return out, nil
}
