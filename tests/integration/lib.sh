# The prologue of the integration scripts, sourced by each after `set -u`
# and its arguments:  . "$(dirname "$0")/lib.sh"
# It makes T, a temporary directory (mode 0755, so that peers of other
# uids reach the sockets in it), removed at exit; the processes handed to
# track() (and qrsd started by start_qrsd) are stopped at exit, however
# the script ends.  Messages begin with the script's name.
# A script may define, after sourcing this:
#   on_fail  what fail() shows after the message (default: $T/log, the
#            output of qrsd started by start_qrsd)
#   on_exit  its own clean-up, run at exit after the tracked processes
#            have ended and before T is removed
qrs_name=${0##*/}
qrs_name=${qrs_name%.sh}

die() {  # die MESSAGE: a precondition not met; nothing to show
  echo "$qrs_name: $*" >&2
  exit 1
}

fail() {  # fail MESSAGE: the test failed; the message, then on_fail's
  echo "$qrs_name: $*" >&2
  on_fail >&2
  exit 1
}

on_fail() { [ -s "$T/log" ] && sed 's/^/qrsd: /' "$T/log"; }
on_exit() { :; }

need_root() {  # need_root [WHY]
  [ "$(id -u)" = 0 ] || die "must run as root${1:+ ($1)}"
}

gid() {  # gid GROUP: the group's number, or the script ends saying so
  qrs_gid=$(getent group "$1" | cut -d: -f3)
  [ -n "$qrs_gid" ] || die "no group '$1' on this system"
  echo "$qrs_gid"
}

tracked=
track() { tracked="$tracked $1"; }
untrack() {
  qrs_keep=
  for qrs_p in $tracked; do
    [ "$qrs_p" = "$1" ] || qrs_keep="$qrs_keep $qrs_p"
  done
  tracked=$qrs_keep
}

qrs_cleanup() {
  for qrs_p in $tracked; do kill "$qrs_p" 2>/dev/null; done
  for qrs_p in $tracked; do wait "$qrs_p" 2>/dev/null; done
  on_exit
  rm -rf "$T"
}

T=$(mktemp -d) || exit 1
trap qrs_cleanup EXIT
# A signal (meson's timeout) ends the script through the EXIT trap too.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
chmod 0755 "$T"

wait_for() {  # wait_for TRIES SECONDS WHAT COMMAND...
  # Runs COMMAND until it succeeds, TRIES times at most, SECONDS apart;
  # fails saying WHAT when it never does.
  qrs_tries=$1 qrs_every=$2 qrs_what=$3 qrs_i=1
  shift 3
  until "$@"; do
    [ "$qrs_i" -lt "$qrs_tries" ] || fail "$qrs_what"
    qrs_i=$((qrs_i + 1))
    sleep "$qrs_every"
  done
}

ready_tries=200   # 10 s at 0.05 s
ready() {  # ready PID WHAT COMMAND...: wait_for COMMAND; fails at once if PID exits
  qrs_rpid=$1 qrs_rwhat=$2
  shift 2
  wait_for "$ready_tries" 0.05 "$qrs_rwhat not ready after $((ready_tries / 20)) s" \
    qrs_alive_and "$@"
}
qrs_alive_and() {
  "$@" && return 0
  kill -0 "$qrs_rpid" 2>/dev/null || fail "$qrs_rwhat exited before it was ready"
  return 1
}

write_conf() {  # write_conf [MODE] < YAML: $T/c.yaml
  # A qrsd on $T/s.sock (MODE, default 0666) with its state in $T and no
  # status file; the rest of the configuration from stdin.
  { cat <<YAML
socket: { path: $T/s.sock, mode: "${1:-0666}", group: "" }
state_dir: $T
status_file: ""
YAML
    cat; } > "$T/c.yaml"
}

access_conf() {  # access_conf GROUP: write_conf, access.group GROUP, a system source
  write_conf <<YAML
access: { group: $1 }
sources: { system: { type: system } }
YAML
}

started() {  # started LOG: qrsd's start line is in LOG (it listens)
  grep -qs 'info: qrsd .* listening on ' "$1"
}

start_qrsd() {  # start_qrsd [LOG [COMMAND...]]
  # Runs COMMAND (default: qrsd -c $T/c.yaml, $qrsd being the script's
  # qrsd) in the background, its output in LOG (default $T/log), its pid
  # in pid and tracked; returns once it has logged that it listens (its
  # socket file alone may be there before it does).
  qrs_log=${1:-$T/log}
  if [ $# -gt 1 ]; then
    shift
  else
    set -- "$qrsd" -c "$T/c.yaml"
  fi
  # emptied here, not by the background job's redirection: ready() must
  # not find the start line of a qrsd that logged here before
  : > "$qrs_log"
  "$@" >> "$qrs_log" 2>&1 &
  pid=$!
  track "$pid"
  ready "$pid" qrsd started "$qrs_log"
}

stop_qrsd() {  # stop_qrsd [PID]: SIGTERM (default: $pid); it must exit 0
  qrs_spid=${1:-$pid}
  kill -TERM "$qrs_spid"
  wait "$qrs_spid"
  qrs_rc=$?
  untrack "$qrs_spid"
  [ "$qrs_spid" != "${pid:-}" ] || pid=
  [ "$qrs_rc" = 0 ] || fail "qrsd $qrs_spid exited with status $qrs_rc on SIGTERM"
}
