#!/usr/bin/env bash
# Installs the .debs of DIR (default build-pkg/deb, from build-debs.sh) with
# apt-get into a fresh Debian 12 root (debootstrap minbase, root.sh: a
# chroot in a mount namespace of its own; nothing is installed on this
# machine) and checks, without systemd running:
#   - every path the units name is there: ExecStart's qrsd and its -c
#     file, ExecReload's qrsctl, the sysusers.d file; the user qrsd and
#     the group qrs exist (made by the postinst); no unit is enabled
#   - qrsd -n accepts the packaged /etc/qrsd/qrsd.yaml (as qrsd's user,
#     and as the default path); qrsctl --help, qrs-audit --help and
#     man -w for every packaged page work
#   - a C program builds against libqrs-dev (pkg-config qrs) and runs
#   - purge leaves no file behind but the ones Debian's rules allow:
#     user and group stay in /etc/passwd and /etc/group, apt's and
#     dpkg's own records (the dependencies are installed before the
#     file list is taken)
set -euo pipefail
# read whole before it runs (an edit meanwhile does not change a run)
{
cd "$(dirname "$0")/../.."
DEBS=$(realpath "${1:-build-pkg/deb}")
# shellcheck source=root.sh
. tests/packaging/root.sh

ls "$DEBS"/*.deb >/dev/null 2>&1 || die "no .deb in $DEBS"
ensure_base
work=$(mktemp -d "${TMPDIR:-/var/tmp}/qrs-debcheck.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
make_root "$BASE_TAR" "$root"
mkdir -p "$root/debs"
cp "$DEBS"/*.deb "$root/debs/"
cp tests/packaging/in-root-checks.sh "$root/checks.sh"

say "Installing $(cd "$DEBS" && echo ./*.deb) in a fresh $SUITE root"
in_root "$root" "$APT_UPDATE"'
  # what apt pulls in with the packages first, so that the purge check
  # below sees only what they and their maintainer scripts do
  ours="qrsd qrs-tools libqrs0 libqrs-dev"
  deps=$(apt-get install -s ./debs/*.deb | awk "/^Inst /{print \$2}" |
         grep -vxF -e qrsd -e qrs-tools -e libqrs0 -e libqrs-dev || true)
  echo "== the dependencies: $(echo $deps | wc -w) packages"
  # (and a C compiler for the libqrs-dev check)
  apt-get install -y -qq --no-install-recommends $deps gcc libc6-dev pkgconf >/dev/null
  # everything on the root file system but what the kernel, apt caches
  # and this test put there
  list() {
    find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /tmp \
      -o -path /debs -o -path /checks.sh -o -path /var/cache/apt \
      -o -path /var/lib/apt/lists \) -prune -o -print | sort
  }
  list > /tmp/before
  echo "== apt-get install ./debs/*.deb"
  apt-get install -y -qq ./debs/*.deb
  bash /checks.sh
  echo "== purge"
  # what systemd makes when qrsd first runs (StateDirectory=qrsd): purge
  # removes it
  install -d -o qrsd -g qrsd -m 0700 /var/lib/qrsd
  echo "{}" > /var/lib/qrsd/quota-upstream.json
  apt-get purge -y -qq $ours
  list > /tmp/after
  # what Debian lets stay: the system user and group (never removed),
  # the backups of the files systemd-sysusers edits, the logs and records
  # of dpkg, apt and debconf, and the man-db index
  comm -13 /tmp/before /tmp/after | grep -vxE "/etc/(passwd|group|shadow|gshadow)-|/var/log/.*|/var/lib/dpkg/.*-old|/var/cache/debconf/.*-old|/var/cache/man(/.*)?" > /tmp/left || true
  if [ -s /tmp/left ]; then
    echo "FAILED: purge left these files behind:"; cat /tmp/left; exit 1
  fi
  comm -23 /tmp/before /tmp/after > /tmp/gone
  if [ -s /tmp/gone ]; then
    echo "FAILED: install and purge removed files that were there before:"
    cat /tmp/gone; exit 1
  fi
  getent passwd qrsd >/dev/null && echo "kept, as Debian does: user qrsd, group qrs"
  echo "purge: nothing left behind"
'
say "check-debs: all passed"
exit
}
