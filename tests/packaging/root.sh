# Debian 12 roots for building and installing the packages, sourced by
# the scripts beside it.  Nothing is installed on this machine: a root is
# a directory made from a cached tarball, entered with chroot inside a
# mount namespace of its own (unshare -m), so that the mounts it needs
# (/proc, /dev, the apt caches) go away with the command.  Needs root.
#
#   QRS_PKG_CACHE   the cache (default ~/.cache/qrs/pkg): debootstrap
#                   itself, the base and builder tarballs, apt's downloads,
#                   the builder's ccache
#   QRS_DEBIAN_MIRROR  the Debian archive (default http://deb.debian.org/debian)

PKG_CACHE=${QRS_PKG_CACHE:-$HOME/.cache/qrs/pkg}
MIRROR=${QRS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
BASE_TAR=$PKG_CACHE/$SUITE-base.tar.zst

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { echo "${0##*/}: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (chroot, mount namespaces)"

# debootstrap: the installed one, else Debian's package unpacked into the
# cache (it is a shell script; nothing is installed).
debootstrap_cmd() {
  if command -v debootstrap >/dev/null; then
    echo debootstrap
    return
  fi
  local d=$PKG_CACHE/debootstrap
  if [ ! -x "$d/usr/sbin/debootstrap" ]; then
    say "Unpacking Debian's debootstrap into $d" >&2
    local tmp; tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -q debootstrap >/dev/null 2>&1) ||
      die "apt-get download debootstrap failed"
    rm -rf "$d"
    dpkg -x "$tmp"/debootstrap_*.deb "$d"
    rm -rf "$tmp"
  fi
  echo "env DEBOOTSTRAP_DIR=$d/usr/share/debootstrap $d/usr/sbin/debootstrap"
}

# The minimal root (debootstrap --variant=minbase, with man-db for
# `man -w`), made once and kept as a tarball.
ensure_base() {
  [ -f "$BASE_TAR" ] && return 0
  mkdir -p "$PKG_CACHE"
  local tmp; tmp=$(mktemp -d "$PKG_CACHE/base.XXXXXX")
  say "debootstrap $SUITE (minbase) from $MIRROR into $BASE_TAR"
  # shellcheck disable=SC2046
  $(debootstrap_cmd) --variant=minbase --include=man-db \
    "$SUITE" "$tmp/root" "$MIRROR" > "$tmp/debootstrap.log" 2>&1 || {
      tail -n 30 "$tmp/debootstrap.log"
      rm -rf "$tmp"
      die "debootstrap failed"
    }
  cat > "$tmp/root/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
EOF
  # apt's downloads and lists live in the cache, bind-mounted (root
  # owns them there); no translations
  cat > "$tmp/root/etc/apt/apt.conf.d/90qrs" <<'EOF'
APT::Sandbox::User "root";
Acquire::Languages "none";
EOF
  rm -rf "$tmp/root/var/cache/apt/archives"/*.deb
  tar --zstd -C "$tmp/root" -cf "$tmp/base.tar.zst" . &&
    mv "$tmp/base.tar.zst" "$BASE_TAR"
  rm -rf "$tmp"
}

# make_root TARBALL DIR: DIR becomes a fresh copy of the root.
make_root() {
  rm -rf "$2"
  mkdir -p "$2"
  tar --zstd -C "$2" -xf "$1"
}

# in_root DIR CMD...: run CMD (a shell command line) as root in the root
# DIR, in a mount namespace of its own, with /proc, /dev, the host's DNS
# configuration and the cached apt lists and downloads mounted (and the
# ccache, where DIR has a /ccache).
in_root() {
  local root=$1
  shift
  mkdir -p "$PKG_CACHE/apt-archives/partial" "$PKG_CACHE/apt-lists/partial"
  unshare --mount --propagation private /bin/sh -ec '
    root=$1; cache=$2; shift 2
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount --bind "$cache/apt-archives" "$root/var/cache/apt/archives"
    mount --bind "$cache/apt-lists" "$root/var/lib/apt/lists"
    if [ -d "$root/ccache" ]; then
      mount --bind "$cache/ccache" "$root/ccache"
    fi
    cp -L /etc/resolv.conf "$root/etc/resolv.conf"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/root LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive \
      /bin/bash -ec "$*"
  ' sh "$root" "$PKG_CACHE" "$@"
}

# apt-get update in a root, retried once (a mirror mid-update).
APT_UPDATE='apt-get update -qq || { sleep 5; apt-get update -qq; }'
