#!/bin/sh
# Usage: sandbox.sh QRSD QRSCTL UNIT
# qrsd end to end as an unprivileged user, the way qrsd.service
# runs it: uid/gid 65534 with no supplementary groups, no capabilities
# (bounding and inheritable sets empty), no_new_privs, UMask 0077, a
# root-owned read-only configuration, and only its state and runtime
# directories writable.  Each local source kind (system, device, timing,
# noise) must serve through qrsctl; nothing may be written outside the
# two directories; the unit's ExecReload (UNIT: qrsd.service), run as
# systemd runs it (the same uid, its socket path substituted), must apply
# a good configuration with status 0 and the diff, and refuse a broken
# one with a non-zero status and the file:line: key, qrsd serving on;
# SIGTERM must end it with status 0.  Needs root (to drop
# to the other uid with setpriv); as anyone else it fails, saying so.
set -u
qrsd=$1 qrsctl=$2 unit=$3
. "$(dirname "$0")/lib.sh"
need_root "setpriv to uid 65534"
command -v setpriv >/dev/null || die "setpriv (util-linux) not found"
U=65534
mkdir -m 0755 "$T/etc" && mkdir -m 0700 "$T/state" && mkdir -m 0755 "$T/run" &&
  chown "$U:$U" "$T/state" "$T/run" || exit 1
cat > "$T/etc/qrsd.yaml" <<YAML
socket: { path: $T/run/qrsd.sock, mode: "0666", group: "" }
state_dir: $T/state
status_file: $T/run/status.json
sources:
  system: { type: system }
  dev: { type: device, path: /dev/urandom }
  jitter: { type: timing, conditioning: sha256 }
  noise: { type: noise, conditioning: raw, mechanisms: [] }
YAML
chmod 0644 "$T/etc/qrsd.yaml"
touch "$T/marker"
sleep 1   # file times below are compared with the marker's
start_qrsd "$T/log" sh -c 'umask 0077; exec "$@"' sh \
  setpriv --reuid=$U --regid=$U --clear-groups \
  --no-new-privs --inh-caps=-all --bounding-set=-all \
  "$qrsd" -c "$T/etc/qrsd.yaml"
# It really is the unprivileged user, with no capabilities.
st=/proc/$pid/status
grep -q "^Uid:[[:space:]]*$U[[:space:]]*$U[[:space:]]*$U[[:space:]]*$U\$" "$st" ||
  fail "qrsd not running as uid $U: $(grep ^Uid: "$st")"
grep -q '^CapEff:[[:space:]]*0*$' "$st" && grep -q '^CapBnd:[[:space:]]*0*$' "$st" ||
  fail "qrsd has capabilities: $(grep ^Cap "$st")"
grep -q '^NoNewPrivs:[[:space:]]*1$' "$st" || fail "no_new_privs not set"
for s in system dev jitter noise; do
  out=$("$qrsctl" --socket "$T/run/qrsd.sock" bytes -n 64 --source "$s" 2>&1) ||
    fail "source $s did not serve: $out"
  [ -n "$out" ] || fail "source $s: empty output"
  echo "source $s served under uid $U"
done
# Nothing written outside the state and runtime directories.
stray=$(find "$T" -newer "$T/marker" ! -path "$T/state*" ! -path "$T/run*" \
        ! -path "$T/log" ! -path "$T" -print)
[ -z "$stray" ] || fail "written outside state/run: $stray"
# systemctl reload: the unit's ExecReload as systemd runs it (User=qrsd:
# the daemon's uid; the unit's socket path replaced by this one's).
reload=$(sed -n 's/^ExecReload=//p' "$unit")
[ -n "$reload" ] || fail "no ExecReload= in $unit"
case $reload in
  *" reload") ;;
  *) fail "ExecReload does not wait for the outcome: $reload" ;;
esac
reload=$(printf '%s\n' "$reload" | sed "s|/run/qrsd/qrsd.sock|$T/run/qrsd.sock|; s|^[^ ]*/qrsctl |$qrsctl |")
cp "$T/etc/qrsd.yaml" "$T/orig.yaml"
printf 'limits: { max_inflight_per_connection: 32 }\n' >> "$T/etc/qrsd.yaml"
# shellcheck disable=SC2086
out=$(setpriv --reuid=$U --regid=$U --clear-groups $reload 2>&1) ||
  fail "ExecReload failed on a good configuration: $out"
case $out in
  *"limits.max_inflight_per_connection: "*" -> 32"*) echo "ExecReload applied: $(printf '%s' "$out" | tr '\n' ' ')" ;;
  *) fail "ExecReload did not print the diff: $out" ;;
esac
cp "$T/etc/qrsd.yaml" "$T/good.yaml"
cp "$T/orig.yaml" "$T/etc/qrsd.yaml"
printf 'limits: { max_connections: 0 }\n' >> "$T/etc/qrsd.yaml"
# shellcheck disable=SC2086
if out=$(setpriv --reuid=$U --regid=$U --clear-groups $reload 2>&1); then
  fail "ExecReload exited 0 on a refused configuration: $out"
fi
case $out in
  *"qrsd.yaml:"*"limits.max_connections"*) echo "ExecReload refused: $out" ;;
  *) fail "ExecReload's refusal does not name file:line: key: $out" ;;
esac
cp "$T/good.yaml" "$T/etc/qrsd.yaml"
"$qrsctl" --socket "$T/run/qrsd.sock" bytes -n 16 --source system > /dev/null ||
  fail "qrsd stopped serving after a refused reload"
# The configuration stays read-only to it.
setpriv --reuid=$U --regid=$U --clear-groups sh -c ": >> '$T/etc/qrsd.yaml'" 2>/dev/null &&
  fail "uid $U can write the configuration"
stop_qrsd
# Socket activation, as qrsd.socket does it: the socket is created by
# root (systemd-socket-activate) and passed to the unprivileged qrsd.
if command -v systemd-socket-activate >/dev/null; then
  rm -f "$T/run/qrsd.sock"
  (umask 0077; exec systemd-socket-activate -l "$T/act.sock" \
     setpriv --reuid=$U --regid=$U --clear-groups --no-new-privs \
     --inh-caps=-all --bounding-set=-all \
     "$qrsd" -c "$T/etc/qrsd.yaml") > "$T/log" 2>&1 &
  pid=$!
  track "$pid"
  i=0
  while ! out=$("$qrsctl" --socket "$T/act.sock" bytes -n 16 --source system 2>&1); do
    i=$((i + 1)); [ $i -lt 100 ] || fail "socket activation: $out"
    sleep 0.1
  done
  # The start-up line may reach the log after the first draw is served
  # (slow under the sanitizers): wait for it up to 5 s.
  wait_for 50 0.1 "qrsd did not say it uses the passed socket" \
    grep -q "listening on.*systemd\|socket activation\|passed" "$T/log"
  [ ! -e "$T/run/qrsd.sock" ] || fail "socket activated qrsd bound its own socket too"
  stop_qrsd
  echo "socket activation OK under uid $U"
else
  fail "systemd-socket-activate not found (package systemd)"
fi
echo "sandbox OK: qrsd served system, device, timing and noise as uid $U"
