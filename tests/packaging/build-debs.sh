#!/usr/bin/env bash
# Builds qrs's Debian packages from a clean clone of the checkout's HEAD
# (committed work only) in a Debian 12 builder root holding exactly the
# Build-Depends of debian/control (so a missing one fails the build), then
# runs lintian on them there; errors and warnings fail.  The .debs and
# lintian's report land in OUT (default build-pkg/deb).
#
#   tests/packaging/build-debs.sh [OUT]      (./setup.sh deb)
#
# The builder root is cached as a tarball keyed by debian/control
# (~/.cache/qrs/pkg, root.sh): a later run only unpacks it.
set -euo pipefail
# read whole before it runs (an edit meanwhile does not change a run)
{
cd "$(dirname "$0")/../.."
REPO=$PWD
OUT=$(realpath -m "${1:-build-pkg/deb}")
# shellcheck source=root.sh
. tests/packaging/root.sh

# Beside the Build-Depends: lintian, and ccache (meson uses it when it is
# there), whose cache ~/.cache/qrs/pkg/ccache outlives the root: the
# clean clone is always built in /build/qrs, so an unchanged file is not
# compiled again.
EXTRA="lintian ccache"
BUILDER_TAR=$PKG_CACHE/$SUITE-build-$( (cat debian/control; echo "$EXTRA") |
  sha256sum | cut -c1-12).tar.zst

ensure_builder() {
  [ -f "$BUILDER_TAR" ] && return 0
  ensure_base
  local tmp; tmp=$(mktemp -d "$PKG_CACHE/build.XXXXXX")
  say "Making the builder root (Build-Depends, lintian) into $BUILDER_TAR"
  make_root "$BASE_TAR" "$tmp/root"
  mkdir -p "$tmp/root/src/debian"
  cp debian/control "$tmp/root/src/debian/"
  in_root "$tmp/root" "$APT_UPDATE"'
    apt-get build-dep -y -qq /src >/dev/null
    apt-get install -y -qq --no-install-recommends '"$EXTRA"' >/dev/null
    rm -rf /src' || { rm -rf "$tmp"; die "making the builder root failed"; }
  tar --zstd -C "$tmp/root" -cf "$tmp/b.tar.zst" . && mv "$tmp/b.tar.zst" "$BUILDER_TAR"
  rm -rf "$tmp"
  # older builders (debian/control changed) are of no use
  find "$PKG_CACHE" -maxdepth 1 -name "$SUITE-build-*.tar.zst" \
    ! -path "$BUILDER_TAR" -delete
}

ensure_builder
work=$(mktemp -d "${TMPDIR:-/var/tmp}/qrs-debs.XXXXXX")
trap 'rm -rf "$work"' EXIT
make_root "$BUILDER_TAR" "$work/root"
mkdir -p "$work/root/ccache" "$PKG_CACHE/ccache"
say "Cloning $(git rev-parse --short HEAD) into the builder root"
git clone -q --no-local "$REPO" "$work/root/build/qrs"
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  echo "note: uncommitted changes are not in the clone (HEAD is built)" >&2

say "dpkg-buildpackage -b (the build's log: $OUT/build.log)"
mkdir -p "$OUT"
rm -f "$OUT"/*.deb "$OUT"/*.changes "$OUT"/*.buildinfo
jobs=$(nproc)
if ! in_root "$work/root" "cd /build/qrs
    export CCACHE_DIR=/ccache CCACHE_MAXSIZE=2G
    DEB_BUILD_OPTIONS='parallel=$jobs nocheck noautodbgsym' dpkg-buildpackage -us -uc -b" \
    > "$OUT/build.log" 2>&1; then
  tail -n 40 "$OUT/build.log"
  die "dpkg-buildpackage failed"
fi
say "lintian (errors and warnings fail; its report: $OUT/lintian.txt)"
rc=0
in_root "$work/root" "cd /build
    setpriv --reuid=nobody --regid=nogroup --clear-groups env HOME=/tmp \
    lintian --fail-on error,warning --display-info --show-overrides \
      qrs_*.changes" > "$OUT/lintian.txt" 2>&1 || rc=$?
cat "$OUT/lintian.txt"
cp "$work/root/build/"*.deb "$work/root/build/"*.changes \
   "$work/root/build/"*.buildinfo "$OUT/"
[ "$rc" -eq 0 ] || die "lintian found errors or warnings"
ls -l "$OUT"/*.deb
exit
}
