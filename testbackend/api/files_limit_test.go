package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// TestFileReadFarOverTheLimit: a file far over the read limit (8 MB) is
// refused 413 FILE_TOO_LARGE at once, in a sandbox that waits for commands
// and in a run-mode one alike. A sparse file of 64 GiB costs its sandbox
// nothing; a run-mode read copied it whole, through the engine's daemon
// and the backend, to drop all but the first 8 MB, until the route's
// timeout (60 s, then 500) held the request and the host's CPUs outside
// every sandbox's limit. Each request here is given notRegularWait, far
// less than that timeout.
func TestFileReadFarOverTheLimit(t *testing.T) {
	t.Parallel()
	c := realBackend(t)
	const makeHuge = "truncate -s 64G /tmp/huge && : > /tmp/ready"
	for _, mode := range []string{"commands", "run mode"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cc := *c.Client
			cc.T = t
			body := map[string]any{"template": "base"}
			if mode == "run mode" {
				body["cmd"] = []string{"sh", "-c", makeHuge + " && sleep 300"}
			}
			id := cc.Running(tokA, body).ID
			if mode == "commands" {
				if out := cc.Command(tokA, id, makeHuge, 0); exitCode(t, out) != 0 {
					t.Fatalf("make the sparse file: %+v", out)
				}
			}
			files := "/sandboxes/" + id + "/files"
			cc.HTTP = &http.Client{Timeout: notRegularWait}
			eventually(t, 60*time.Second, func() error {
				if r := cc.Do("GET", files+"?path=/tmp/ready", tokA, nil, nil); r.Status != http.StatusOK {
					return fmt.Errorf("the program has not made the file yet: %v", r)
				}
				return nil
			})
			for i := 0; i < 3; i++ {
				apitest.ExpectErr(t, cc.Do("GET", files+"?path=/tmp/huge", tokA, nil, nil), http.StatusRequestEntityTooLarge, "FILE_TOO_LARGE")
			}
		})
	}
}
