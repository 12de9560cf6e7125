#!/bin/sh
# Install into a scratch DESTDIR, check that everything an install holds is
# there, build the README's C example against the installed qrs.pc and run
# it against the installed qrsd.
set -eu
build=$1
src=$2
dest=$(mktemp -d /tmp/qrs-install-XXXXXX)
trap 'kill $pid 2>/dev/null; rm -rf "$dest"' EXIT
pid=

meson install -C "$build" --destdir "$dest" --no-rebuild --quiet

prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
root=$dest$prefix
for f in sbin/qrsd bin/qrsctl include/qrs/qrs.h include/qrs/client.h \
         include/qrs/error.h include/qrs/sampler.h include/qrs/dtype.h etc/qrsd/qrsd.yaml \
         lib/systemd/system/qrsd.service lib/systemd/system/qrsd.socket \
         lib/systemd/system/qrsd-metrics.service \
         lib/systemd/system/qrsd-metrics.timer \
         share/man/man1/qrsctl.1 share/man/man8/qrsd.8 \
         share/man/man5/qrsd.yaml.5 share/man/man3/libqrs.3; do
  [ -e "$root/$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
pc=$(find "$root" -name qrs.pc | head -n1)
[ -n "$pc" ] || { echo "qrs.pc not installed" >&2; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
cmp "$root/etc/qrsd/qrsd.yaml" "$src/conf/qrsd.yaml"

# The README example, compiled against the installed headers and library.
sed -n '/^## Drawing from C/,/^```$/p' "$src/README.md" |
  sed -n '/^```c$/,/^```$/p' | sed '1d;$d' > "$dest/example.c"
[ -s "$dest/example.c" ] || { echo "no C example in README.md" >&2; exit 1; }
cflags=$(PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$dest" \
  pkg-config --cflags qrs)
libs=$(PKG_CONFIG_PATH="$(dirname "$pc")" PKG_CONFIG_SYSROOT_DIR="$dest" \
  pkg-config --libs qrs)
cc -Wall -Werror -o "$dest/example" "$dest/example.c" $cflags $libs \
  -Wl,-rpath,"$libdir"

"$root/sbin/qrsd" --socket "$dest/qrsd.sock" 2>"$dest/qrsd.log" &
pid=$!
i=0
until LD_LIBRARY_PATH="$libdir" "$root/bin/qrsctl" --socket "$dest/qrsd.sock" \
    health >/dev/null 2>&1; do
  i=$((i+1))
  [ $i -lt 100 ] || { cat "$dest/qrsd.log" >&2; exit 1; }
  sleep 0.05
done
out=$(QRS_SOCKET="$dest/qrsd.sock" "$dest/example")
echo "$out"
case "$out" in
  "u="*"from system (10000 bytes)") ;;
  *) echo "unexpected output from the README example" >&2; exit 1 ;;
esac
