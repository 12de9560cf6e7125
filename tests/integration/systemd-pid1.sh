#!/bin/sh
# Usage: systemd-pid1.sh QRSCTL ENTROPY_SERVER UNITDIR SYSUSERS
# qrsd.service and qrsd.socket (UNITDIR: the build's copies, ExecStart in
# the build tree) run by a real systemd 252 as PID 1, in a
# private PID and mount namespace of this test: its own /run, and a copy
# of /etc so that systemd-sysusers makes the qrsd user and qrs group there
# and nothing of the host's /etc changes.  Under the unit's whole sandbox
# (seccomp filter, MemoryDenyWriteExecute, ProtectSystem=strict,
# DevicePolicy=closed, IPAddressDeny, no capabilities, user qrsd) every
# local source kind and a gRPC upstream on loopback must serve; the
# socket unit must start qrsd on the first connection; 'systemctl reload'
# must apply a good file with status 0 and fail on a broken one, qrsd
# serving on; STATUS= must reach systemd; with the watchdog at 2 s and
# the loop stalled (test hook) systemd must kill and restart qrsd; stop
# must end it cleanly.  Needs root (namespaces).
set -u
qrsctl=$(readlink -f "$1") server=$(readlink -f "$2") unitdir=$(readlink -f "$3")
sysusers=$(readlink -f "$4")
. "$(dirname "$0")/lib.sh"
need_root namespaces
# On a machine whose own PID 1 is systemd, a second systemd would share
# its cgroup hierarchies: not done there (exit 77, meson's SKIP, saying
# so).  The build machines of this project run no init of that kind.
if [ -d /run/systemd/system ]; then
  echo "systemd-pid1: this machine's PID 1 is systemd; a second one beside it could disturb it: not run" >&2
  exit 77
fi
# The namespace has its own empty /tmp and /var/tmp (systemd-tmpfiles
# --boot empties them, so the host's may not be shared): a build tree
# under either is out of its systemd's sight.
for p in "$unitdir" "$sysusers" "$qrsctl"; do
  case $p in
  /tmp/*|/var/tmp/*)
    echo "systemd-pid1: the build is under /tmp or /var/tmp ($p), which this test's namespace replaces with an empty tmpfs: not run; run the suite from a checkout elsewhere" >&2
    exit 77 ;;
  esac
done
for c in unshare nsenter /lib/systemd/systemd; do
  command -v "$c" >/dev/null || die "$c not found"
done
touch "$T/started"
sdpid= made_state=
on_exit() {
  [ -n "$sdpid" ] && kill -9 "$sdpid" 2>/dev/null
  # the namespace's mounts go with its last process; the cgroups its
  # systemd made (empty now) are removed
  sleep 0.2
  [ -e "$T/started" ] &&
    find /sys/fs/cgroup -mindepth 2 -depth -type d -newer "$T/started" \
      \( -name '*.slice' -o -name '*.service' -o -name '*.scope' -o \
         -name '*.mount' -o -name '*.socket' \) -exec rmdir {} + 2>/dev/null
  [ -n "$made_state" ] && rmdir /var/lib/qrsd 2>/dev/null
}
in_ns() { nsenter -t "$sdpid" -m -p "$@"; }
on_fail() {
  [ -n "$sdpid" ] && in_ns journalctl --no-pager -o short-monotonic -n 60 2>&1 |
    sed 's/^/journal: /'
}

# A gRPC upstream on loopback, outside the namespace (the network is the
# host's: IPAddressAllow=localhost lets qrsd reach it).
"$server" --listen 127.0.0.1:0 > "$T/server.out" 2>&1 &
track $!
listening() { addr=$(sed -n 's/^listening on //p' "$T/server.out"); [ -n "$addr" ]; }
wait_for 100 0.1 "the entropy server did not start" listening

cp -a /etc "$T/etc"
# What would act on the machine beyond the namespace (the kernel's
# settings, modules, binfmt, udev, the host's files) is masked.
# Nothing the host enabled (timers such as apt-daily, sockets, services)
# starts in the namespace.
rm -rf "$T"/etc/systemd/system/*.wants
for u in systemd-tmpfiles-clean.timer apt-daily.timer \
         apt-daily-upgrade.timer dpkg-db-backup.timer man-db.timer \
         e2scrub_all.timer fstrim.timer logrotate.timer \
         systemd-sysctl.service systemd-binfmt.service \
         systemd-modules-load.service systemd-random-seed.service \
         systemd-udevd.service systemd-udev-trigger.service \
         systemd-hwdb-update.service ldconfig.service systemd-pstore.service \
         systemd-firstboot.service systemd-machine-id-commit.service \
         systemd-journal-catalog-update.service systemd-update-done.service \
         systemd-remount-fs.service systemd-fsck-root.service \
         proc-sys-fs-binfmt_misc.automount proc-sys-fs-binfmt_misc.mount \
         sys-kernel-config.mount sys-kernel-debug.mount \
         sys-kernel-tracing.mount sys-fs-fuse-connections.mount \
         dev-hugepages.mount dev-mqueue.mount tmp.mount \
         systemd-ask-password-console.path systemd-ask-password-wall.path \
         cryptsetup.target swap.target local-fs.target; do
  ln -sf /dev/null "$T/etc/systemd/system/$u"
done
# StateDirectory=qrsd: a tmpfs of the namespace's (an empty mount point
# on the host, removed afterwards if this test made it)
made_state=
[ -d /var/lib/qrsd ] || { mkdir /var/lib/qrsd && made_state=1; } ||
  fail "cannot make /var/lib/qrsd"
cat > "$T/boot.sh" <<EOF
#!/bin/sh
mount --make-rprivate /
mount --bind "$T/etc" /etc
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=0755 tmpfs /var/log
mount -t tmpfs -o mode=0755 tmpfs /var/lib/qrsd
# systemd-tmpfiles --boot empties /tmp: the namespace's own
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=1777 tmpfs /var/tmp
exec env container=qrs-test /lib/systemd/systemd --system --unit=sysinit.target \
  --log-target=journal-or-kmsg
EOF
chmod +x "$T/boot.sh"
unshare --pid --fork --mount --cgroup --mount-proc "$T/boot.sh" > "$T/boot.log" 2>&1 &
upid=$!
# systemd is the child of unshare, PID 1 inside
i=0
while :; do
  sdpid=$(pgrep -P "$upid" -x systemd | head -n 1)
  [ -n "$sdpid" ] && st=$(in_ns systemctl is-system-running 2>/dev/null) &&
    { [ "$st" = running ] || [ "$st" = degraded ]; } && break
  i=$((i + 1)); [ $i -lt 150 ] || { cat "$T/boot.log" >&2; fail "systemd did not come up (${st:-no answer})"; }
  sleep 0.2
done
echo "systemd 252 is PID 1 in the test's namespace: $st"

in_ns systemd-sysusers "$sysusers" || fail "systemd-sysusers failed"
in_ns getent passwd qrsd > /dev/null || fail "no user qrsd"
cp "$unitdir/qrsd.service" "$unitdir/qrsd.socket" "$T/etc/systemd/system/" ||
  fail "cannot install the units"
mkdir -p "$T/etc/systemd/system/qrsd.service.d"
# The watchdog test below wants seconds, not the unit's 30; and the test
# hook that stalls the loop on SIGUSR2.
cat > "$T/etc/systemd/system/qrsd.service.d/test.conf" <<EOF
[Service]
WatchdogSec=2s
Environment=QRSD_TEST_HOOKS=1 QRSD_TEST_STALL_MS=6000
EOF
mkdir -p "$T/etc/qrsd"
cat > "$T/etc/qrsd/qrsd.yaml" <<EOF
default_source: system
sources:
  system: { type: system }
  dev: { type: device, path: /dev/urandom }
  jitter: { type: timing, conditioning: sha256 }
  noise: { type: noise, conditioning: raw, mechanisms: [] }
  up: { type: grpc, target: "$addr", mode: unary, insecure: true }
EOF
chmod 0644 "$T/etc/qrsd/qrsd.yaml"
in_ns systemctl daemon-reload || fail "daemon-reload failed"
in_ns systemctl start qrsd.socket || fail "qrsd.socket did not start"
[ "$(in_ns systemctl is-active qrsd.service)" = inactive ] ||
  fail "qrsd.service started before any connection"

q="in_ns $qrsctl --socket /run/qrsd/qrsd.sock"
# The first connection starts qrsd (socket activation).
for s in system dev jitter noise up; do
  # shellcheck disable=SC2086
  $q bytes -n 64 --source "$s" > "$T/bytes" 2> "$T/err" ||
    fail "source $s did not serve under the unit: $(cat "$T/err")"
  n=$(wc -c < "$T/bytes")
  [ "$n" -eq 64 ] || fail "source $s: $n bytes instead of 64"
  echo "source $s served under qrsd.service"
done
[ "$(in_ns systemctl is-active qrsd.service)" = active ] || fail "qrsd.service is not active"
pid=$(in_ns systemctl show -P MainPID qrsd.service)
user=$(in_ns ps -o user= -p "$pid")
[ "$user" = qrsd ] || fail "qrsd runs as '$user', not qrsd"
# The sandbox is really on it: a seccomp filter, no_new_privs, no
# capabilities, its own mount namespace with / read-only.
st=$(in_ns cat "/proc/$pid/status")
printf '%s\n' "$st" | grep -q '^Seccomp:[[:space:]]*2$' || fail "no seccomp filter on qrsd"
printf '%s\n' "$st" | grep -q '^NoNewPrivs:[[:space:]]*1$' || fail "no_new_privs not set"
printf '%s\n' "$st" | grep -q '^CapEff:[[:space:]]*0*$' &&
  printf '%s\n' "$st" | grep -q '^CapBnd:[[:space:]]*0*$' || fail "qrsd has capabilities"
in_ns nsenter -t "$pid" -m sh -c ': > /usr/.qrs-probe' 2>/dev/null &&
  fail "/usr is writable in qrsd's namespace (ProtectSystem=strict)"
echo "sandbox on qrsd ($pid): uid qrsd, seccomp filter, no_new_privs, no capabilities, / read-only"
st=$(in_ns systemctl show -P StatusText qrsd.service)
case $st in
  *[Ss]erving*) echo "STATUS: $st" ;;
  *) fail "no serving STATUS= line: '$st'" ;;
esac
# shellcheck disable=SC2086
$q draw --source up > /dev/null || fail "a draw from the gRPC upstream failed"
# which noise mechanisms the sandbox left (qrsctl sources' detail)
# shellcheck disable=SC2086
$q sources | grep '^  noise '

# systemctl reload waits for the outcome: good, then refused.
cp "$T/etc/qrsd/qrsd.yaml" "$T/orig.yaml"
printf 'limits: { max_inflight_per_connection: 32 }\n' >> "$T/etc/qrsd/qrsd.yaml"
in_ns systemctl reload qrsd.service || fail "systemctl reload of a good file failed"
in_ns journalctl --no-pager -u qrsd.service | grep -q "limits.max_inflight_per_connection: 64 -> 32" ||
  fail "the reload's diff is not in the journal"
cp "$T/etc/qrsd/qrsd.yaml" "$T/good.yaml"
cp "$T/orig.yaml" "$T/etc/qrsd/qrsd.yaml"
printf 'limits: { max_connections: 0 }\n' >> "$T/etc/qrsd/qrsd.yaml"
if in_ns systemctl reload qrsd.service 2> "$T/reload.err"; then
  fail "systemctl reload of a broken file succeeded"
fi
in_ns journalctl --no-pager -u qrsd.service | grep -q "qrsd.yaml:[0-9]*: limits.max_connections" ||
  fail "the refusal (file:line: key) is not in the journal"
echo "systemctl reload: good file applied, broken file refused ($(head -n 1 "$T/reload.err"))"
cp "$T/good.yaml" "$T/etc/qrsd/qrsd.yaml"
[ "$(in_ns systemctl show -P MainPID qrsd.service)" = "$pid" ] ||
  fail "qrsd was restarted by a reload"
# shellcheck disable=SC2086
$q draw > /dev/null || fail "qrsd stopped serving after a refused reload"

# The watchdog: the loop stalled for 6 s > WatchdogSec=2s; systemd kills
# qrsd (SIGABRT) and Restart=on-failure starts a new one.
in_ns kill -USR2 "$pid" || fail "cannot signal qrsd"
restarted() {
  new=$(in_ns systemctl show -P MainPID qrsd.service)
  [ -n "$new" ] && [ "$new" != 0 ] && [ "$new" != "$pid" ]
}
wait_for 150 0.1 "systemd did not restart the stalled qrsd" restarted
in_ns journalctl --no-pager -u qrsd.service | grep -q -i "watchdog timeout" ||
  fail "no watchdog timeout in the journal"
echo "watchdog: the stalled qrsd ($pid) was killed by systemd and restarted ($new)"
# shellcheck disable=SC2086
serves() { $q draw > /dev/null 2>&1; }
wait_for 100 0.1 "the restarted qrsd does not serve" serves

in_ns systemctl stop qrsd.service qrsd.socket || fail "systemctl stop failed"
res=$(in_ns systemctl show -P Result qrsd.service)
[ "$res" = success ] || fail "qrsd stopped with result '$res'"
echo "systemd-pid1 OK: qrsd.service ran as qrsd under its sandbox, served every source kind and a gRPC upstream, reloaded, was restarted by the watchdog and stopped cleanly"
