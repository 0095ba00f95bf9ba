// Package attacks holds what a hostile tenant runs inside its sandboxes,
// shared by the isolation tests that prove a bound and the bench's
// hostile-neighbour phase that measures what it costs the others.
package attacks

import "strings"

// DNSFloodMark is the file, in the sandbox, that DNSFloodScript touches
// once it floods.
const DNSFloodMark = "/home/user/flooding"

// DNSFloodScript sends DNS queries for NAME to the sandbox's resolver as fast
// as one UDP socket allows, for SECONDS, never reading an answer; it
// touches DNSFloodMark once it has sent its first thousand.
const DNSFloodScript = `import socket, struct, sys, time
name, seconds = sys.argv[1], float(sys.argv[2])
server = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
q = struct.pack(">HHHHHH", 0x5253, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
end, sent = time.monotonic() + seconds, 0
while time.monotonic() < end:
    try:
        s.sendto(q, (server, 53))
        sent += 1
    except BlockingIOError:
        time.sleep(0.0005)
    if sent == 1000:
        open("` + DNSFloodMark + `", "w").close()
`

// ShellQuote quotes s as one word for sh.
func ShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'" }
