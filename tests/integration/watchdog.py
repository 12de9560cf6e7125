#!/usr/bin/env python3
"""Usage: watchdog.py QRSD

The systemd watchdog with a real qrsd and a real notify socket
(an AF_UNIX datagram socket in place of systemd's): with WATCHDOG_USEC
300 ms, qrsd pings WATCHDOG=1 about every 100 ms after READY=1, with a
STATUS= serving summary; when the loop is stalled for 1.5 s (test hook
QRSD_TEST_HOOKS=1, SIGUSR2) no ping arrives for that long; afterwards the
pings resume.  Before READY=1, opening a source sends EXTEND_TIMEOUT_USEC
with STATUS=Starting: ..., and nothing extends the timeout after it.  Prints the measured gaps."""
import os, signal, socket, subprocess, sys, tempfile, time

qrsd = sys.argv[1]
tmp = tempfile.mkdtemp()
ns = os.path.join(tmp, "notify")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(ns)
conf = os.path.join(tmp, "c.yaml")
with open(conf, "w") as f:
    f.write(f'socket: {{ path: {tmp}/s.sock, mode: "0600", group: "" }}\n'
            f'state_dir: {tmp}\nstatus_file: ""\n'
            'sources: { system: { type: system } }\n')
env = dict(os.environ, NOTIFY_SOCKET=ns, WATCHDOG_USEC="300000",
           QRSD_TEST_HOOKS="1", QRSD_TEST_STALL_MS="1500")
env.pop("WATCHDOG_PID", None)
log = open(os.path.join(tmp, "log"), "w+")
p = subprocess.Popen([qrsd, "-c", conf], env=env, stdout=log, stderr=log)


def fail(msg):
    p.kill()
    log.seek(0)
    sys.stderr.write(f"watchdog: {msg}\n" + log.read())
    sys.exit(1)


def messages(until):
    """(time, message) received until the monotonic time until."""
    out = []
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return out
        sock.settimeout(left)
        try:
            out.append((time.monotonic(), sock.recv(4096).decode()))
        except socket.timeout:
            return out


def pings(msgs):
    return [t for t, m in msgs if "WATCHDOG=1" in m.split("\n")]


first = messages(time.monotonic() + 1.5)
if not any("READY=1" in m for _, m in first):
    fail("no READY=1 within 1.5 s: %r" % first)
ready_t = min(t for t, m in first if "READY=1" in m)
# Start-up steps before READY=1: each extends the start timeout.
steps = [m for t, m in first if t <= ready_t and "EXTEND_TIMEOUT_USEC=" in m]
if not any("STATUS=Starting: opening source 'system'" in m for m in steps):
    fail("no EXTEND_TIMEOUT_USEC step for source 'system' before READY=1: "
         "%r" % first)
if any("EXTEND_TIMEOUT_USEC=" in m for t, m in first if t > ready_t):
    fail("EXTEND_TIMEOUT_USEC after READY=1: %r" % first)
before = [t for t in pings(first) if t > ready_t]
if len(before) < 5:
    fail(f"only {len(before)} pings in the 1.5 s after READY=1")
gaps = [b - a for a, b in zip(before, before[1:])]
if max(gaps) > 0.3:
    fail(f"a gap of {max(gaps):.3f} s between pings of an idle qrsd")
if not any(m.startswith("WATCHDOG=1\nSTATUS=Serving on ") for _, m in first):
    fail("no STATUS= serving summary with the pings: %r" % first[-1:])
print(f"idle: {len(before)} pings, largest gap {max(gaps) * 1000:.0f} ms")

t0 = time.monotonic()
p.send_signal(signal.SIGUSR2)
during = messages(t0 + 3.0)
after = pings(during)
# The ping that may already have been queued right at t0 aside, nothing
# for the 1.5 s stall.
late = [t for t in after if t > t0 + 0.15]
if not late:
    fail("the pings did not resume after the stall")
stall_gap = late[0] - max([t for t in after if t <= t0 + 0.15] + [before[-1]])
if stall_gap < 1.3:
    fail(f"pings continued while the loop was stalled (gap {stall_gap:.3f} s)")
resumed = [t for t in late if t > late[0]]
if len(resumed) < 3:
    fail(f"only {len(resumed)} pings after the stall")
print(f"stalled loop: no ping for {stall_gap * 1000:.0f} ms "
      f"(stall 1500 ms, WatchdogSec 300 ms); {len(resumed) + 1} pings after")

p.send_signal(signal.SIGTERM)
rc = p.wait(10)
tail = messages(time.monotonic() + 0.2)
if rc != 0:
    fail(f"exit status {rc} on SIGTERM")
print("watchdog OK")
