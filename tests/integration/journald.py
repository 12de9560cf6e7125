#!/usr/bin/env python3
"""A journald stand-in: receives the native journal protocol on
/run/systemd/journal/socket (as systemd-journald does) and writes each
entry as one JSON object per line to OUT.  Parses both field forms of
the protocol: KEY=value lines and the binary KEY\\n<le64 length><data>\\n
form (systemd's JOURNAL_NATIVE_PROTOCOL).  Entries that arrive as a
memfd (SCM_RIGHTS, for entries too big for a datagram) are read too.
Runs until SIGTERM.

Usage: journald.py SOCKET OUT"""
import array
import json
import os
import signal
import socket
import struct
import sys


def parse(data):
    fields, i = {}, 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            i = nl + 1
        else:
            k = line
            (n,) = struct.unpack_from("<Q", data, nl + 1)
            v = data[nl + 9:nl + 9 + n]
            i = nl + 9 + n + 1
        fields[k.decode()] = v.decode(errors="replace")
    return fields


def main(path, out):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    os.chmod(path, 0o666)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    with open(out, "a", buffering=1) as f:
        while True:
            fds = array.array("i")
            data, anc, _, _ = s.recvmsg(1 << 20, socket.CMSG_LEN(4))
            for level, kind, d in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(d[:4])
            if fds:
                with os.fdopen(fds[0], "rb") as m:
                    data = m.read()
            f.write(json.dumps(parse(data)) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
