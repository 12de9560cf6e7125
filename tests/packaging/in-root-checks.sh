#!/bin/bash
# Run by check-debs.sh inside the root where the .debs were just
# installed (no systemd running): the checks after install.
set -euo pipefail
fail() { echo "FAILED: $*"; exit 1; }
ok() { echo "ok: $*"; }
unitdir=/lib/systemd/system

echo "== files where the units expect them"
for u in qrsd.service qrsd.socket qrsd-metrics.service qrsd-metrics.timer; do
  [ -f "$unitdir/$u" ] || fail "$unitdir/$u is missing"
done
# every absolute program and file the units name
exec_start=$(sed -n 's/^ExecStart=//p' "$unitdir/qrsd.service")
exec_reload=$(sed -n 's/^ExecReload=//p' "$unitdir/qrsd.service")
metrics=$(sed -n 's/^ExecStart=//p' "$unitdir/qrsd-metrics.service")
set -- $exec_start
[ "$1" = /usr/sbin/qrsd ] && [ -x "$1" ] || fail "ExecStart runs '$1'"
[ "$2" = -c ] && [ -f "$3" ] || fail "ExecStart's configuration '$3' is missing"
conf=$3
ok "ExecStart=$exec_start"
for cmd in "$exec_reload" "$metrics"; do
  set -- $cmd
  [ -x "$1" ] || fail "'$1' (run by a unit) is missing"
done
ok "ExecReload and qrsd-metrics.service run $1"
grep -qx 'ListenStream=/run/qrsd/qrsd.sock' "$unitdir/qrsd.socket" ||
  fail "qrsd.socket listens elsewhere"
grep -q '^socket: *$' "$conf" && grep -q '^  path: /run/qrsd/qrsd.sock$' "$conf" ||
  fail "$conf's socket.path is not the one qrsd.socket listens on"
ok "qrsd.socket and $conf name /run/qrsd/qrsd.sock"
[ -f /usr/lib/sysusers.d/qrsd.conf ] || fail "no /usr/lib/sysusers.d/qrsd.conf"
grep -q '^u qrsd ' /usr/lib/sysusers.d/qrsd.conf || fail "sysusers.d: no user qrsd"
[ "$(getent passwd qrsd | cut -d: -f6)" = /var/lib/qrsd ] ||
  fail "the postinst did not make the user qrsd (home /var/lib/qrsd)"
getent group qrs >/dev/null || fail "the postinst did not make the group qrs"
ok "user qrsd and group qrs made by the postinst"
grep -qx 'User=qrsd' "$unitdir/qrsd.service" || fail "qrsd.service: User= is not qrsd"
grep -qx 'ConfigurationDirectory=qrsd' "$unitdir/qrsd.service" &&
  [ "$(dirname "$conf")" = /etc/qrsd ] ||
  fail "ConfigurationDirectory=qrsd and the configuration $conf disagree"
dpkg-query -W -f='${Conffiles}\n' qrsd | grep -q "^ $conf " ||
  fail "$conf is not a conffile"
ok "$conf is a conffile"
# nothing enabled: no symlink in any .wants of /etc/systemd/system
if [ -d /etc/systemd/system ] &&
   find /etc/systemd/system -lname '*qrsd*' | grep -q .; then
  fail "a unit was enabled: $(find /etc/systemd/system -lname '*qrsd*')"
fi
ok "no unit enabled"
[ -d /usr/share/doc/qrsd/examples/qrsd.service.d ] ||
  fail "no drop-in examples in /usr/share/doc/qrsd/examples"

echo "== the programs"
qrsd -n -c "$conf" || fail "qrsd -n -c $conf refused the packaged configuration"
qrsd -n || fail "qrsd -n (its default path) refused the packaged configuration"
setpriv --reuid=qrsd --regid=qrsd --init-groups /usr/sbin/qrsd -n -c "$conf" ||
  fail "qrsd's user cannot read $conf"
ok "qrsd -n accepts $conf (as root and as qrsd)"
qrsctl --help >/dev/null || fail "qrsctl --help"
qrs-audit --help >/dev/null || fail "qrs-audit --help"
ok "qrsctl --help, qrs-audit --help"
for page in qrsd.8 qrsd.yaml.5 qrsctl.1 qrs-audit.1 libqrs.3; do
  p=$(man -w "${page%.*}.${page##*.}" 2>/dev/null) || fail "man -w ${page}"
  [ "$p" = "/usr/share/man/man${page##*.}/$page.gz" ] || fail "man -w $page: $p"
done
man -w qrsd >/dev/null
ok "man -w finds qrsd(8), qrsd.yaml(5), qrsctl(1), qrs-audit(1), libqrs(3)"
[ -f /usr/share/bash-completion/completions/qrsctl ] || fail "no completion"

echo "== libqrs-dev"
cat > /tmp/v.c <<'EOF'
#include <qrs/qrs.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  const char *e = qrs_strerror(QRS_E_PROTOCOL);
  printf("libqrs %s\n", qrs_version());
  return e != NULL && strlen(qrs_version()) > 0 ? 0 : 1;
}
EOF
# shellcheck disable=SC2046
gcc -Wall -Werror -o /tmp/v /tmp/v.c $(pkg-config --cflags --libs qrs) ||
  fail "a program does not build against pkg-config qrs"
/tmp/v || fail "a program linking libqrs.so.0 does not run"
rm -f /tmp/v /tmp/v.c
ok "pkg-config qrs: builds and runs"
