#!/usr/bin/python3
"""Call the four RPCs of qr_entropy.EntropyService and qr_purity.PurityService
with Python grpc (Debian python3-grpcio) and check every answer.

usage: grpc_client.py ADDRESS [API_KEY [CA_FILE]]

ADDRESS is what grpc.insecure_channel takes (127.0.0.1:PORT or
unix:/path); with CA_FILE the channel is TLS, trusting that CA (PEM).  Messages are encoded by hand (the field numbers of
proto/entropy_service.proto and proto/purity_service.proto), so nothing
but grpcio is needed.  Exit status 0 when every check passed; each failure
is printed on stderr."""
import math
import struct
import sys

import grpc


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def read_varint(buf, i):
    """The varint at buf[i] and the index after it."""
    v, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def fields(buf):
    """(field, wire type, value) of a message."""
    i, out = 0, []
    while i < len(buf):
        tag, i = read_varint(buf, i)
        f, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 1:
            v = struct.unpack("<d", buf[i:i + 8])[0]
            i += 8
        elif wt == 2:
            n, i = read_varint(buf, i)
            v = buf[i:i + n]
            i += n
        else:
            raise ValueError("wire type %d" % wt)
        out.append((f, wt, v))
    return out


def entropy_req(n, seq):
    return b"\x08" + varint(n) + b"\x10" + varint(seq)


def draw_req(seq):
    return b"\x08" + varint(seq)


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what, file=sys.stderr)


def check_entropy(reply, n, seq, what):
    f = {k: v for k, _, v in fields(reply)}
    check(len(f.get(1, b"")) == n, "%s: %d bytes, %d asked" %
          (what, len(f.get(1, b"")), n))
    check(f.get(2) == seq, "%s: echo %s, sent %d" % (what, f.get(2), seq))
    check(f.get(3, 0) > 0, "%s: no generation_timestamp_ns" % what)


def check_draw(reply, seq, what):
    f = {k: v for k, _, v in fields(reply)}
    u = f.get(1, 0.0)
    check(0.0 < u < 1.0 and math.isfinite(u), "%s: u = %r" % (what, u))
    check(f.get(3) == seq, "%s: echo %s, sent %d" % (what, f.get(3), seq))


def main():
    addr = sys.argv[1]
    md = [("api-key", sys.argv[2])] if len(sys.argv) > 2 else None
    if len(sys.argv) > 3:
        with open(sys.argv[3], "rb") as f:
            ch = grpc.secure_channel(addr, grpc.ssl_channel_credentials(f.read()))
    else:
        ch = grpc.insecure_channel(addr)

    def method(kind, path):
        """A callable for path that sends and returns raw bytes."""
        return getattr(ch, kind)(path, request_serializer=bytes,
                                 response_deserializer=bytes)

    unary = method("unary_unary", "/qr_entropy.EntropyService/GetEntropy")
    for i in range(5):
        check_entropy(unary(entropy_req(1000, 100 + i), timeout=10,
                            metadata=md), 1000, 100 + i, "GetEntropy")

    stream = method("stream_stream",
                    "/qr_entropy.EntropyService/StreamEntropy")
    reqs = [entropy_req(64 + i, 200 + i) for i in range(8)]
    replies = list(stream(iter(reqs), timeout=10, metadata=md))
    check(len(replies) == 8, "StreamEntropy: %d replies" % len(replies))
    for i, r in enumerate(replies):
        check_entropy(r, 64 + i, 200 + i, "StreamEntropy")

    draw = method("unary_unary", "/qr_purity.PurityService/GetDraw")
    for i in range(3):
        check_draw(draw(draw_req(300 + i), timeout=10, metadata=md),
                   300 + i, "GetDraw")

    dstream = method("stream_stream", "/qr_purity.PurityService/StreamDraws")
    replies = list(dstream(iter([draw_req(400 + i) for i in range(4)]),
                           timeout=10, metadata=md))
    check(len(replies) == 4, "StreamDraws: %d replies" % len(replies))
    for i, r in enumerate(replies):
        check_draw(r, 400 + i, "StreamDraws")

    # Without the key (when one is required) every call is refused.
    if md:
        try:
            unary(entropy_req(8, 1), timeout=10)
            check(False, "GetEntropy without the key succeeded")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.UNAUTHENTICATED,
                  "without the key: %s" % e.code())

    print("python grpc: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
