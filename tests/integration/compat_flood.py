#!/usr/bin/python3
"""A connection flood on qrsd's TLS gRPC compat endpoint (compat-flood.sh
starts qrsd with a low RLIMIT_NOFILE).

usage: compat_flood.py PORT CA_FILE KEY_FILE QRSCTL SOCKET HANDSHAKE_MS
       compat_flood.py unix:PATH QRSCTL SOCKET PER_PEER
       compat_flood.py --restart unix:PATH TRIGGER HANDSHAKE_MS

  1. Plain TCP connections are opened to 127.0.0.1:PORT (at most 600, for
     at most 3 s) and held: more than the endpoint may hold.  Meanwhile
     local draws over qrsd's Unix socket (qrsctl) must all be served, and
     `qrsctl health` must say degraded, naming the endpoint.
  2. The flood is closed; a keyed GetEntropy over TLS must be answered
     within a second.
  3. A connection that finished its TLS handshake but sends nothing, and
     one that sends nothing at all, must be closed by qrsd within
     HANDSHAKE_MS + 2 s.

With unix:PATH (a compat unix socket, max_connections_per_peer PER_PEER):
4 x PER_PEER connections from this uid, of which all but PER_PEER must be
closed at once, as `qrsctl status` must count them; once they are
closed an unkeyed GetEntropy must be answered within a second.

With --restart (qrsd runs with shim_accept.c, which fails gRPC's next
accept4() with EMFILE once TRIGGER exists): a call answered, then TRIGGER
made, a call that gRPC never accepts, and within HANDSHAKE_MS + 8 s a call
answered again (qrsd started gRPC again).

Everything is bounded in count and time.  Exit status 0 when every check
passed; each failure is printed on stderr."""
import json
import socket
import ssl
import subprocess
import sys
import threading
import time

import grpc

from grpc_client import check, failures

FLOOD_MAX = 600
FLOOD_S = 3.0


def local_draws(qrsctl, sock, stop, out):
    """qrsctl draws over the Unix socket until stop is set (at most 200)."""
    for _ in range(200):
        if stop.is_set():
            break
        t0 = time.monotonic()
        r = subprocess.run([qrsctl, "-s", sock, "-t", "2000", "draw"],
                           capture_output=True, text=True, timeout=10)
        out.append((r.returncode, time.monotonic() - t0,
                    r.stderr.strip()[-200:]))
        time.sleep(0.05)


def qrsctl_json(qrsctl, sock, what):
    """qrsctl --json WHAT: its first line parsed (None without one), and
    its stderr."""
    r = subprocess.run([qrsctl, "-s", sock, "-t", "2000", "--json", what],
                       capture_output=True, text=True, timeout=10)
    try:
        return json.loads(r.stdout.splitlines()[0]), r.stderr
    except (ValueError, IndexError):
        return None, r.stderr


def health(qrsctl, sock):
    h, err = qrsctl_json(qrsctl, sock, "health")
    if h is None:
        return {"state": "no answer: " + err.strip()[-200:]}
    return h


def flood(port, qrsctl, sock):
    held, refused = [], 0
    stop = threading.Event()
    draws = []
    t = threading.Thread(target=local_draws, args=(qrsctl, sock, stop, draws))
    t.start()
    h = None
    end = time.monotonic() + FLOOD_S
    try:
        for i in range(FLOOD_MAX):
            if time.monotonic() >= end:
                break
            s = socket.socket()
            s.settimeout(0.5)
            try:
                s.connect(("127.0.0.1", port))
                held.append(s)
            except OSError:
                refused += 1
                s.close()
        # the flood is held: the endpoint is full
        h = health(qrsctl, sock)
        while time.monotonic() < end:
            time.sleep(0.1)
    finally:
        stop.set()
        t.join(timeout=30)
        for s in held:
            s.close()
    print("flood: %d connections opened, %d failed to connect; health "
          "during it: %s (%s)" % (len(held), refused, h.get("state"),
                                   h.get("message", "")))
    check(h.get("state") == "degraded" and "compat" in h.get("message", ""),
          "health during the flood: %s (%s), not degraded naming the "
          "compat endpoint" % (h.get("state"), h.get("message", "")))
    bad = [d for d in draws if d[0] != 0]
    slow = [d for d in draws if d[1] > 1.0]
    print("local draws during the flood: %d, %d failed, %d over 1 s" %
          (len(draws), len(bad), len(slow)))
    check(len(draws) >= 5, "only %d local draws ran" % len(draws))
    check(not bad, "local draws failed during the flood: %s" % bad[:3])


def keyed_call(port, ca, key):
    t0 = time.monotonic()
    ch = grpc.secure_channel("127.0.0.1:%d" % port,
                             grpc.ssl_channel_credentials(ca))
    call = ch.unary_unary("/qr_entropy.EntropyService/GetEntropy")
    try:
        reply = call(b"\x08\x20\x10\x07", timeout=1.0,
                     metadata=[("api-key", key)])
        dt = time.monotonic() - t0
        check(len(reply) > 32, "keyed call: a %d-byte reply" % len(reply))
        check(dt <= 1.0, "keyed call answered after %.2f s" % dt)
        print("keyed call after the flood: answered in %.3f s" % dt)
    except grpc.RpcError as e:
        check(False, "keyed call after the flood: %s %s (%.2f s)" %
              (e.code(), e.details(), time.monotonic() - t0))
    finally:
        ch.close()


def closed_within(s, limit):
    """Seconds until the peer closed s (EOF or reset), or None."""
    t0 = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - t0 < limit:
        try:
            if s.recv(4096) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None


def expect_closed(s, limit, what, label):
    """Check that the peer closes s (what: the failure's words for it,
    label: the log's) within limit seconds; close s."""
    try:
        dt = closed_within(s, limit)
        check(dt is not None, "%s is still open after %.1f s" % (what, limit))
        if dt is not None:
            print("%s: closed after %.2f s" % (label, dt))
    finally:
        s.close()


def silent_connections(port, ca_file, handshake_ms):
    limit = handshake_ms / 1000.0 + 2.0
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.check_hostname = False
    ctx.set_alpn_protocols(["h2"])
    raw = socket.create_connection(("127.0.0.1", port), timeout=2)
    try:
        tls = ctx.wrap_socket(raw)
    except OSError as e:
        raw.close()
        check(False, "TLS handshake with the endpoint: %s" % e)
        return
    expect_closed(tls, limit, "a TLS connection without an HTTP/2 preface",
                  "TLS without a preface")
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    expect_closed(s, limit, "a silent TCP connection", "silent TCP")


def status(qrsctl, sock):
    st, _ = qrsctl_json(qrsctl, sock, "status")
    return {} if st is None else st


def unix_flood(path, qrsctl, sock, per_peer):
    held = []
    try:
        for _ in range(4 * per_peer):
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(1.0)
            s.connect(path)
            held.append(s)
        time.sleep(0.5)
        closed = 0
        for s in held:
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        st = status(qrsctl, sock)
        print("unix flood: %d of %d closed at once; status: %s connections, "
              "%s refused, bound %s" % (closed, len(held),
                                        st.get("compat_connections"),
                                        st.get("compat_connections_refused"),
                                        st.get("compat_max_connections")))
        check(closed == 3 * per_peer, "unix flood: %d closed at once, not "
              "%d" % (closed, 3 * per_peer))
        check(st.get("compat_connections") == per_peer,
              "status: compat_connections %s, not %d" %
              (st.get("compat_connections"), per_peer))
        check(st.get("compat_connections_refused", 0) >= 3 * per_peer,
              "status: compat_connections_refused %s" %
              st.get("compat_connections_refused"))
        r = subprocess.run([qrsctl, "-s", sock, "-t", "2000", "draw"],
                           capture_output=True, text=True, timeout=10)
        check(r.returncode == 0, "a local draw during the unix flood: %s" %
              r.stderr.strip())
    finally:
        for s in held:
            s.close()
    t0 = time.monotonic()
    ch = grpc.insecure_channel("unix:" + path)
    try:
        reply = ch.unary_unary("/qr_entropy.EntropyService/GetEntropy")(
            b"\x08\x20\x10\x07", timeout=1.0)
        check(len(reply) > 32, "unix call: a %d-byte reply" % len(reply))
        print("call after the unix flood: answered in %.3f s" %
              (time.monotonic() - t0))
    except grpc.RpcError as e:
        check(False, "call after the unix flood: %s %s" % (e.code(),
                                                          e.details()))
    finally:
        ch.close()


def call(addr, timeout):
    ch = grpc.insecure_channel(addr)
    try:
        reply = ch.unary_unary("/qr_entropy.EntropyService/GetEntropy")(
            b"\x08\x20\x10\x07", timeout=timeout)
        return len(reply) > 32
    except grpc.RpcError:
        return False
    finally:
        ch.close()


def restart(addr, trigger, handshake_ms):
    check(call(addr, 2.0), "the first call was not answered")
    open(trigger, "w").close()
    t0 = time.monotonic()
    check(not call(addr, 1.5), "a call was answered although gRPC's "
          "accept4() failed")
    ok = False
    while time.monotonic() - t0 < handshake_ms / 1000.0 + 8.0:
        if call(addr, 0.5):
            ok = True
            break
        time.sleep(0.2)
    dt = time.monotonic() - t0
    check(ok, "no call answered %.1f s after gRPC's accept error" % dt)
    if ok:
        print("gRPC's accept error: a call answered again after %.1f s" % dt)


def main():
    if sys.argv[1] == "--restart":
        restart(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        print("compat flood: %d failures" % len(failures))
        sys.exit(1 if failures else 0)
    if sys.argv[1].startswith("unix:"):
        unix_flood(sys.argv[1][5:], sys.argv[2], sys.argv[3],
                   int(sys.argv[4]))
        print("compat flood: %d failures" % len(failures))
        sys.exit(1 if failures else 0)
    port = int(sys.argv[1])
    with open(sys.argv[2], "rb") as f:
        ca = f.read()
    with open(sys.argv[3]) as f:
        key = f.readline().strip()
    qrsctl, sock, handshake_ms = sys.argv[4], sys.argv[5], int(sys.argv[6])
    flood(port, qrsctl, sock)
    keyed_call(port, ca, key)
    silent_connections(port, sys.argv[2], handshake_ms)
    print("compat flood: %d failures" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
