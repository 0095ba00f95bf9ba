package testbackend

import (
	"fmt"
	"path/filepath"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/testmode"
)

// TestModeDir is where, inside the data directory, the test mode's
// runtime keeps its containers and their files.
const TestModeDir = "testmode"

// openTestRuntime opens the test mode's runtime (package testmode) and
// gives it a running container for every running record it has none for,
// before the manager reconciles: records from before the test mode had a
// runtime (they kept their files themselves, and hand them over here) and
// records of a real-mode backend on the same data directory. Both stay
// running, as they always did in test mode.
func openTestRuntime(dataDir string, st *store.Store) (*testmode.Runtime, error) {
	rt, err := testmode.Open(filepath.Join(dataDir, TestModeDir))
	if err != nil {
		return nil, err
	}
	recs, err := st.Sandboxes()
	if err != nil {
		return nil, err
	}
	for _, sb := range recs {
		if sb.Status != sandbox.StatusRunning {
			continue
		}
		c := container.Container{ID: sb.ContainerID, Name: sandbox.ContainerName(sb.ID), Labels: map[string]string{container.LabelSandboxID: sb.ID}}
		if err := rt.Adopt(c, sb.Files); err != nil {
			return nil, fmt.Errorf("test mode: adopting sandbox %s: %w", sb.ID, err)
		}
		if sb.Files != nil {
			// The runtime has them now (on disk, Adopt returned).
			sb.Files = nil
			if err := st.PutSandbox(sb); err != nil {
				return nil, err
			}
		}
	}
	return rt, nil
}
