package isolation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// TestFileReadPacedBesideAnother: while another account has a live
// sandbox, an account's large file read moves at its transfer rate
// (sandbox.DefaultTransferRate in the shared backend) past the burst, so
// one read cannot take the host's copying for itself; the file still
// arrives whole. The bound is the pace's own: no host, however fast,
// answers sooner.
func TestFileReadPacedBesideAnother(t *testing.T) {
	t.Parallel()
	c := backend(t)
	peer := c.Running(tokReaderPeer, map[string]any{"template": "base"})
	defer c.Raw("DELETE", "/sandboxes/"+peer.ID, tokReaderPeer, nil, nil)
	sb := c.Running(tokReader, map[string]any{"template": "base"})
	defer c.Raw("DELETE", "/sandboxes/"+sb.ID, tokReader, nil, nil)

	const size = 6 << 20
	// Written by a command, which is not paced: the account's whole
	// burst is left for the read.
	if res := c.Command(tokReader, sb.ID, fmt.Sprintf("yes paced | head -c %d > /home/user/big", size), 30000); res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("writing the file: %+v", res)
	}
	r := c.Do("GET", "/sandboxes/"+sb.ID+"/files?path=/home/user/big", tokReader, nil, nil)
	got := apitest.DecodeData[struct{ Content string }](t, r)
	if len(got.Content) != size || !strings.HasPrefix(got.Content, "paced\npaced\n") {
		t.Fatalf("read %d bytes (%.20q…), want the file's %d", len(got.Content), got.Content, size)
	}
	// The burst and a buffer's worth of read-ahead move at once, the
	// rest at the rate.
	least := time.Duration(float64(size-sandbox.TransferBurst-(128<<10)) / sandbox.DefaultTransferRate * float64(time.Second))
	if r.Elapsed < least {
		t.Fatalf("a %d-byte read beside another account's sandbox took %s, less than its pace allows (%s at %d bytes a second)", size, r.Elapsed, least, sandbox.DefaultTransferRate)
	}
	t.Logf("a %d-byte read beside another account took %s (at least %s)", size, r.Elapsed, least)
}
