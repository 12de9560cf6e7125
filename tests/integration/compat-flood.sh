#!/bin/sh
# Usage: compat-flood.sh QRSD QRSCTL FLOOD_PY SHIM_ACCEPT
# A connection flood on the gRPC compat endpoint (TLS, api keys, on
# 127.0.0.1) of a qrsd run with RLIMIT_NOFILE 256, so that a few hundred
# connections would exhaust its descriptors.  compat_flood.py floods it
# and checks: local draws over the Unix socket are served throughout,
# health says degraded while the endpoint is full, a keyed call is
# answered within a second of the flood's end, and connections that stay
# silent (after TLS, or before it) are closed after the handshake
# timeout.  Then qrsd must still stop cleanly.  Then the same endpoint on
# a unix socket: a uid over max_connections_per_peer is refused, the
# refusals are counted in status, and a call is answered once the flood
# ends.  Last, gRPC's own accept4() fails once with EMFILE (an LD_PRELOAD
# shim): gRPC drops its listener for good, and qrsd must notice and start
# gRPC again.
set -u
qrsd=$1 qrsctl=$2 flood=$3 shim=$4
PY=${QRS_PYTHON:-/usr/bin/python3}   # Debian's, with python3-grpcio
. "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || die "openssl not found"
"$PY" -c 'import grpc' 2>/dev/null ||
  die "python3 grpc not found (Debian package python3-grpcio)"

C=$T/pki
mkdir "$C" || exit 1
ossl() { openssl "$@" 2>> "$C/openssl.log" || fail "openssl $1 failed: $(tail -n 3 "$C/openssl.log")"; }
ec="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
ossl req -x509 $ec -keyout "$C/ca.key" -out "$C/ca.pem" -days 2 -subj /CN=qrs-test-ca
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$C/ext"
ossl req $ec -keyout "$C/srv.key" -out "$C/srv.csr" -subj /CN=127.0.0.1
ossl x509 -req -in "$C/srv.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" \
  -CAcreateserial -days 2 -extfile "$C/ext" -out "$C/srv.pem"
openssl rand -hex 24 > "$C/client.key" || fail "openssl rand"
h=$("$qrsctl" hash-key < "$C/client.key") || fail "qrsctl hash-key"
echo "client $h" > "$C/api_keys"
chmod 0600 "$C/api_keys"

PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
HANDSHAKE_MS=3000
# The main socket's share (16 connections and some) is kept in reserve:
# about 100 descriptors, some 30 connections, are left to the endpoint,
# below its max_connections.
write_conf <<YAML
limits: { max_connections: 16 }
sources: { system: { type: system } }
grpc_compat:
  listen: "127.0.0.1:$PORT"
  source: system
  tls_cert: $C/srv.pem
  tls_key: $C/srv.key
  api_keys: $C/api_keys
  max_connections: 1000
  max_connections_per_peer: 1000
  handshake_timeout_ms: $HANDSHAKE_MS
YAML
start_qrsd "$T/log" sh -c 'ulimit -n 256 && exec "$0" -c "$1"' "$qrsd" "$T/c.yaml"
grep -q "gRPC compat endpoint on 127.0.0.1:$PORT" "$T/log" ||
  fail "no compat endpoint on 127.0.0.1:$PORT"

timeout 60 "$PY" "$flood" "$PORT" "$C/ca.pem" "$C/client.key" "$qrsctl" \
  "$T/s.sock" "$HANDSHAKE_MS" || fail "the flood's checks failed"
# still serving locally, and the key never in the log
"$qrsctl" -s "$T/s.sock" draw > /dev/null || fail "no draw after the flood"
! grep -qF "$(cat "$C/client.key")" "$T/log" || fail "the api key is in the log"
stop_qrsd

# The same endpoint on a unix socket, without TLS or keys, with the
# grpc_compat setting in $1.
write_unix_conf() {
  write_conf <<YAML
sources: { system: { type: system } }
grpc_compat:
  listen: "unix:$T/compat.sock"
  source: system
  socket_group: ""
  $1
YAML
}

# One uid may hold max_connections_per_peer connections, the rest are
# closed at once.
write_unix_conf "max_connections_per_peer: 8"
start_qrsd "$T/log"
timeout 60 "$PY" "$flood" "unix:$T/compat.sock" "$qrsctl" "$T/s.sock" 8 ||
  fail "the unix flood's checks failed"
stop_qrsd
[ ! -e "$T/compat.sock" ] || fail "the compat socket is left after qrsd stopped"

write_unix_conf "handshake_timeout_ms: 1000"
start_qrsd "$T/log" env LD_PRELOAD="$shim" \
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
  QRS_SHIM_ACCEPT_EMFILE="$T/accept-fails" "$qrsd" -c "$T/c.yaml"
timeout 60 "$PY" "$flood" --restart "unix:$T/compat.sock" "$T/accept-fails" \
  1000 || fail "gRPC was not started again after its accept error"
grep -q "gRPC started again" "$T/log" || fail "no 'gRPC started again' in the log"
stop_qrsd
echo "compat-flood: ok"
