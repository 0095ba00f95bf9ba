// Package takeover hands the test mode's runtime (package testmode) the
// running sandboxes it has no container for, before the lifecycle
// reconciles: records from before the test mode had a runtime (they kept
// their files themselves, and hand them over here) and records of a
// real-mode backend on the same data directory. Both stay running, as
// they always did in test mode. It is a package of its own because it
// reads the lifecycle's records (package sandbox), whose tests run on
// package testmode.
package takeover

import (
	"fmt"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/testmode"
)

// Records gives rt a running container for every running record in st it
// has none for, with the files the record kept, and drops those files
// from the record once rt has them.
func Records(rt *testmode.Runtime, st *store.Store) error {
	recs, err := st.Sandboxes()
	if err != nil {
		return err
	}
	for _, sb := range recs {
		if sb.Status != sandbox.StatusRunning {
			continue
		}
		c := container.Container{ID: sb.ContainerID, Name: sandbox.ContainerName(sb.ID), Labels: map[string]string{container.LabelSandboxID: sb.ID}}
		if err := rt.Adopt(c, sb.Files); err != nil {
			return fmt.Errorf("test mode: adopting sandbox %s: %w", sb.ID, err)
		}
		if sb.Files != nil {
			// The runtime has them now (on disk, Adopt returned).
			sb.Files = nil
			if err := st.PutSandbox(sb); err != nil {
				return err
			}
		}
	}
	return nil
}
