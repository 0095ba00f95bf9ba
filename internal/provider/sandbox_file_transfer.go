package provider

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// How files travel. The API writes and reads UTF-8 text only
// (PUT/GET /sandboxes/{id}/files, at most 1,000,000 characters a write).
// Text within that limit goes through it as is. Anything else (binary,
// or longer text) is sent base64-encoded in parts next to the target,
// then decoded, checked against its SHA-256 and moved into place by one
// command inside the sandbox (sh, cat, base64, sha256sum and mv: coreutils
// or busybox). A failed upload never leaves half a file at the path.

const (
	// uploadPartChars is the size of one base64 part: within the API's
	// limit of one write, and a multiple of 4.
	uploadPartChars = 999_996
	// helperCommandTimeout bounds the provider's own small commands.
	helperCommandTimeout = 2 * time.Minute
)

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fileTransferError is a file operation the sandbox refused, with what
// the command printed.
type fileTransferError struct {
	op, path string
	detail   string
}

func (e fileTransferError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.op, e.path, e.detail)
}

// writeSandboxFile writes data to p in the sandbox and returns the
// SHA-256 of what is now there.
func writeSandboxFile(ctx context.Context, c *client.Client, id, p string, data []byte) (string, error) {
	want := sha256Hex(data)
	if utf8.Valid(data) && utf8.RuneCount(data) <= maxFileChars {
		err := retryBusy(ctx, func() error {
			_, err := c.WriteFile(ctx, id, p, string(data))
			return err
		})
		return want, err
	}
	return want, uploadBase64(ctx, c, id, p, data, want)
}

func uploadBase64(ctx context.Context, c *client.Client, id, p string, data []byte, want string) error {
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return err
	}
	tmp := path.Join(path.Dir(p), ".rarecloud-upload-"+hex.EncodeToString(nonce[:]))
	enc := base64.StdEncoding.EncodeToString(data)
	n := 0
	for off := 0; off < len(enc) || n == 0; off += uploadPartChars {
		end := min(off+uploadPartChars, len(enc))
		part := enc[off:end]
		name := fmt.Sprintf("%s.b64.%d", tmp, n)
		if err := retryBusy(ctx, func() error {
			_, err := c.WriteFile(ctx, id, name, part)
			return err
		}); err != nil {
			cleanupUpload(ctx, c, id, tmp)
			return err
		}
		n++
	}
	script := fmt.Sprintf(`p=%s; t=%s; n=%d
[ -d "$p" ] && { rm -f -- "$t".b64.*; exit 11; }
i=0
while [ "$i" -lt "$n" ]; do cat -- "$t.b64.$i" || exit 12; i=$((i+1)); done | base64 -d > "$t.bin" || { rm -f -- "$t".b64.* "$t.bin"; exit 12; }
rm -f -- "$t".b64.*
h=$(sha256sum < "$t.bin") || { rm -f -- "$t.bin"; exit 12; }
h=${h%%%% *}
[ "$h" = %s ] || { rm -f -- "$t.bin"; echo "the decoded file has SHA-256 $h" >&2; exit 13; }
mv -f -- "$t.bin" "$p" || { rm -f -- "$t.bin"; exit 12; }
echo "$h"`, shQuote(p), shQuote(tmp), n, shQuote(want))
	res, err := runCommand(ctx, c, id, script, 10*time.Minute)
	if err != nil {
		cleanupUpload(ctx, c, id, tmp)
		return err
	}
	switch code := exitOf(res); {
	case code == 0 && strings.TrimSpace(res.Stdout) == want:
		return nil
	case code == 11:
		return fileTransferError{"writing", p, "it is a directory in the sandbox"}
	case code == 13:
		return fileTransferError{"writing", p, fmt.Sprintf("the upload arrived damaged (%s, want %s); apply again", strings.TrimSpace(res.Stderr), want)}
	default:
		return fileTransferError{"writing", p, commandFailure(res)}
	}
}

// cleanupUpload removes the parts of a failed upload, as well as it can.
func cleanupUpload(ctx context.Context, c *client.Client, id, tmp string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_, _ = c.RunCommand(ctx, id, client.CommandRequest{Cmd: fmt.Sprintf(`rm -f -- %s.b64.* %s.bin`, shQuote(tmp), shQuote(tmp)), TimeoutMs: 30000})
}

var sha256LineRE = regexp.MustCompile(`^([0-9a-f]{64})\s`)

// sandboxFileSHA256 returns the SHA-256 of the file at p, or exists =
// false when there is none.
func sandboxFileSHA256(ctx context.Context, c *client.Client, id, p string) (sum string, exists bool, err error) {
	script := fmt.Sprintf(`p=%s
[ -e "$p" ] || exit 3
[ -d "$p" ] && exit 4
sha256sum < "$p"`, shQuote(p))
	res, err := runCommand(ctx, c, id, script, helperCommandTimeout)
	if err != nil {
		return "", false, err
	}
	switch exitOf(res) {
	case 0:
		if m := sha256LineRE.FindStringSubmatch(res.Stdout); m != nil {
			return m[1], true, nil
		}
		return "", false, fileTransferError{"hashing", p, "sha256sum printed no hash: " + strings.TrimSpace(res.Stdout)}
	case 3:
		return "", false, nil
	case 4:
		return "", false, fileTransferError{"hashing", p, "it is a directory in the sandbox"}
	}
	return "", false, fileTransferError{"hashing", p, commandFailure(res)}
}

// readSandboxFileBase64 reads a binary file as base64, for import.
func readSandboxFileBase64(ctx context.Context, c *client.Client, id, p string) (string, error) {
	res, err := runCommand(ctx, c, id, fmt.Sprintf(`base64 -w 0 -- %s`, shQuote(p)), helperCommandTimeout)
	if err != nil {
		return "", err
	}
	if exitOf(res) != 0 {
		return "", fileTransferError{"reading", p, commandFailure(res)}
	}
	if res.StdoutTruncated {
		return "", fileTransferError{"reading", p, "the file is too large to import as content_base64 (the API returns at most 1 MiB of a command's output, about 768 KiB of binary data)"}
	}
	return strings.TrimSpace(res.Stdout), nil
}

// removeSandboxFile removes the file at p; a file already gone counts.
func removeSandboxFile(ctx context.Context, c *client.Client, id, p string) error {
	res, err := runCommand(ctx, c, id, "rm -f -- "+shQuote(p), helperCommandTimeout)
	if err != nil {
		return err
	}
	if exitOf(res) != 0 {
		return fileTransferError{"removing", p, commandFailure(res)}
	}
	return nil
}

// exitOf is a command's exit code, -1 when it was killed at its timeout.
func exitOf(res *client.ExecResult) int64 {
	if res == nil || res.ExitCode == nil {
		return -1
	}
	return *res.ExitCode
}

// commandFailure describes a failed helper command.
func commandFailure(res *client.ExecResult) string {
	if res.TimedOut || res.ExitCode == nil {
		return "the command inside the sandbox ran past its timeout"
	}
	msg := strings.TrimSpace(outputTail(res.Stderr, 5, 1000))
	if msg == "" {
		msg = "no error output"
	}
	hint := ""
	if *res.ExitCode == 127 {
		hint = " (a tool is missing from the sandbox's image: files need sh, cat, base64, sha256sum, mv and rm, from coreutils or busybox)"
	}
	return fmt.Sprintf("the command inside the sandbox exited with code %d: %s%s", *res.ExitCode, msg, hint)
}
