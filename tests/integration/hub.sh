#!/bin/sh
# Usage: hub.sh QRSD QRSCTL [--bench QRS_BENCH QRS_ENTROPY_SERVER |
#                             --stress ROUNDS QRS_AUDIT]
# A hub qrsd and three node qrsd on loopback TLS.  Everything is
# real: certificates made here with openssl (a CA, the hub's certificate
# for 127.0.0.1, an expired one, one from another CA), a hub serving its
# source through grpc_compat with TLS and api keys, three nodes using it
# as their grpc upstream (each with its own key), and qrsctl clients.
#   1. CLIENTS clients per node draw through the hub: every draw served by
#      the hub source (served_by, served_type grpc, no fallback); server-
#      amplified draws carry the hub's metadata with the nonce echo
#      verified.
#   2. The hub is killed (SIGKILL) and restarted mid-run: no client draw
#      fails, every draw not served by the hub is labelled a fallback, and
#      every node is back on the hub within its breaker's recovery window.
#   3. A key over requests_per_minute is refused with RESOURCE_EXHAUSTED
#      naming the key and the limit, while another key is unaffected.
#   4. A wrong key, no key, a hub certificate from another CA, an expired
#      hub certificate and a plaintext client on the TLS port: each
#      refused, with the error asserted (seen by a node, and by Python
#      grpc for the status codes).
#   5. The hub's status file lists each key's use by name, and neither
#      its log nor the status file contains a key.
# With --bench, the hub's source is itself a gRPC upstream: a
# qrs-entropy-server on loopback TLS with an api key; every node also has
# a source "direct" calling that server itself, in its own upstream mode,
# so that node -> hub -> source and node -> source differ by one hop.
# A second hub ("devhub") serves its local system source, as a hub on a
# QRNG device's machine does; the nodes' source "devhub" calls it.
# After 1. it runs `qrs-bench hub` on the nodes twice, through the hub and
# through devhub, each against "direct" (latency through each node:
# unary, server_streaming, bidi_streaming; 3 nodes x CLIENTS clients'
# draws/s) and exits with its status.
# With --stress, the stop after the flood of streams, ROUNDS times: the
# hub, the three nodes and the probe node (each with a draw journal and a
# status file) up, the flood from key 'flood' while the nodes' clients draw, then every
# qrsd stopped with SIGTERM (the hub first or the nodes first, after the
# flood or during it, by turns); each must exit 0, its status file
# rewritten at its stop, each node's journal intact (qrs-audit), without
# gap records, holding every draw its clients were given.
set -u
qrsd=$1 qrsctl=$2
bench= esrv= stress=
case ${3:-} in
  --bench)
    bench=${4:?--bench needs the qrs-bench program}
    esrv=${5:?--bench needs the qrs-entropy-server program} ;;
  --stress)
    stress=${4:?--stress needs a count of rounds}
    audit=${5:?--stress needs the qrs-audit program} ;;
esac
PY=${QRS_PYTHON:-/usr/bin/python3}   # Debian's, with python3-grpcio
# How much slower than a plain build this qrsd may be (the C harness's
# test_time_scale()): $QRS_TEST_TIME_SCALE, else 4 for an ASan build, else
# 1.  Stretches the waits for what must happen, never for what must not.
SCALE=${QRS_TEST_TIME_SCALE:-1}
[ -n "${QRS_TEST_TIME_SCALE:-}" ] || ! grep -qa __asan_init "$qrsd" || SCALE=4
CLIENTS=${QRS_HUB_CLIENTS:-16}
[ -z "$stress" ] || CLIENTS=${QRS_HUB_CLIENTS:-4}
DRAWS=${QRS_HUB_DRAWS:-6}
. "$(dirname "$0")/lib.sh"
for p in openssl "$PY"; do
  command -v "$p" >/dev/null || die "$p not found"
done
"$PY" -c 'import grpc' 2>/dev/null ||
  die "python3 grpc not found (Debian package python3-grpcio)"
on_fail() {
  for f in "$T"/*.log; do
    [ -s "$f" ] && tail -n 15 "$f" | sed "s|^|$(basename "$f"): |"
  done
}
# The clients' loops end once $T/stop exists (their nodes are gone).
on_exit() { touch "$T/stop"; wait 2>/dev/null; }
now_ms() { date +%s%3N; }
T0=$(now_ms)
step() { echo "hub: [$(( $(now_ms) - T0 )) ms] $*"; }

# --- certificates ---------------------------------------------------------
C=$T/pki
mkdir "$C" || exit 1
ossl() { openssl "$@" 2>> "$C/openssl.log" || fail "openssl $1 failed: $(tail -n 3 "$C/openssl.log")"; }
ec="-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes"
ossl req -x509 $ec -keyout "$C/ca.key" -out "$C/ca.pem" -days 2 -subj /CN=qrs-test-ca
ossl req -x509 $ec -keyout "$C/other.key" -out "$C/other.pem" -days 2 -subj /CN=other-ca
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$C/ext"
server_cert() {  # server_cert NAME CA DAYS: NAME.pem, NAME.key for 127.0.0.1
  ossl req $ec -keyout "$C/$1.key" -out "$C/$1.csr" -subj /CN=127.0.0.1
  ossl x509 -req -in "$C/$1.csr" -CA "$C/$2.pem" -CAkey "$C/$2.key" \
    -CAcreateserial -days "$3" -extfile "$C/ext" -out "$C/$1.pem"
}
server_cert hub ca 2
server_cert expired ca -1       # notAfter a day before now
server_cert foreign other 2
openssl verify -CAfile "$C/ca.pem" "$C/expired.pem" 2>&1 | grep -q 'certificate has expired' ||
  fail "the expired certificate is not expired"

# --- api keys ---------------------------------------------------------------
K=$T/keys
mkdir -m 0700 "$K" || exit 1
: > "$K/api_keys"
(umask 077 && openssl rand -hex 24 > "$K/source.key") || fail "openssl rand"
for n in node-1 node-2 node-3 tight spare flood; do
  openssl rand -hex 24 > "$K/$n.key" || fail "openssl rand"
  h=$("$qrsctl" hash-key < "$K/$n.key") || fail "qrsctl hash-key"
  want=$(head -n 1 "$K/$n.key" | tr -d '\n' | sha256sum | cut -d' ' -f1)
  [ "$h" = "$want" ] || fail "hash-key $h, sha256sum $want"
  case $n in
    tight) echo "$n $h requests_per_minute=3" ;;
    flood) echo "$n $h streams=4" ;;
    # A node in server_streaming mode opens a stream per fetch: on a
    # loaded machine (calls slow, timed out, retried) 16 clients have
    # reached the default share of 64 streams.
    node-*) echo "$n $h streams=256 in_flight=512" ;;
    *) echo "$n $h" ;;
  esac >> "$K/api_keys"
done
echo "not-a-key-of-this-hub" > "$K/wrong.key"
chmod 0600 "$K"/*.key   # secrets: qrsd refuses one that others may read

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
ready_tries=300   # ready(): 15 s

# --- the hub's source, with --bench: an entropy server over TLS ---------------
# Its upstream mode on the hub: QRS_HUB_SOURCE_MODE (default unary).
SRCMODE=${QRS_HUB_SOURCE_MODE:-unary}
HUBSRC=system
if [ -n "$bench" ]; then
  SPORT=$(free_port)
  "$esrv" --listen "127.0.0.1:$SPORT" --tls-cert "$C/hub.pem" \
    --tls-key "$C/hub.key" --api-key-file "$K/source.key" \
    > "$T/source.log" 2>&1 &
  SRCPID=$!
  track $SRCPID
  ready $SRCPID "the entropy server" grep -q "listening on" "$T/source.log"
  HUBSRC=src
fi
# A grpc source on the entropy server, with the nodes' breaker on the hub
# (a 2 s floor under the adaptive call timeout: a loaded machine's slow
# call is measured, not cut at 1.5 x P99), and no fallback: a failure is
# an error the benchmark sees, never bytes from elsewhere.
source_up() {  # source_up NAME MODE
  printf '  %s: { type: grpc, target: "127.0.0.1:%s", mode: %s, tls: { ca_file: %s }, api_key_file: "%s", preprobe: false, timeout_ms: 5000, retry_count: 0, quota: { max_requests_per_minute: 0 }, breaker: { min_timeout_ms: 2000 } }\n' \
    "$1" "$SPORT" "$2" "$C/ca.pem" "$K/source.key"
}

# --- the hub ------------------------------------------------------------------
PORT=$(free_port)
EPORT=$(free_port)
hub_conf() {  # hub_conf NAME PORT CERT
  mkdir -p "$T/$1"
  { cat <<YAML
socket: { path: $T/$1/qrsd.sock, mode: "0600", group: "" }
state_dir: $T/$1
status_file: $T/$1/status.json
sources:
  system: { type: system }
YAML
    [ -z "$bench" ] || source_up src "$SRCMODE"
    cat <<YAML
grpc_compat:
  listen: "127.0.0.1:$2"
  source: $HUBSRC
  tls_cert: $C/$3.pem
  tls_key: $C/$3.key
  api_keys: $K/api_keys
YAML
  } > "$T/$1/qrsd.yaml"
}
HUBPID=
start_hub() {
  "$qrsd" -c "$T/hub/qrsd.yaml" >> "$T/hub.log" 2>&1 &
  HUBPID=$!
  track $HUBPID
  # its own start line: hub.log holds those of the hubs before it
  ready $HUBPID hub grep -q "qrsd\[$HUBPID\]: info: gRPC compat endpoint on 127.0.0.1:$PORT" "$T/hub.log"
}
hub_conf hub "$PORT" hub
hub_conf exphub "$EPORT" expired
if [ -n "$bench" ]; then
  # The other deployment: the source is a device on the hub's own machine
  # (here the system CSPRNG, what the entropy server serves): a hub whose
  # source is local, so that node -> hub -> its source and node -> entropy
  # server are one hop each.
  DPORT=$(free_port)
  HUBSRC=system hub_conf devhub "$DPORT" hub
  "$qrsd" -c "$T/devhub/qrsd.yaml" > "$T/devhub.log" 2>&1 &
  DEVPID=$!
  track $DEVPID
  ready $DEVPID "the hub with a local source" \
    grep -q "gRPC compat endpoint on 127.0.0.1:$DPORT" "$T/devhub.log"
fi
start_hub
EXPPID=
if [ -z "$stress" ]; then
  "$qrsd" -c "$T/exphub/qrsd.yaml" > "$T/exphub.log" 2>&1 &
  EXPPID=$!
  track $EXPPID
  ready $EXPPID "the hub with the expired certificate" \
    grep -q "gRPC compat endpoint on 127.0.0.1:$EPORT" "$T/exphub.log"
fi
step "hub on 127.0.0.1:$PORT (TLS, api keys)"

# --- nodes ------------------------------------------------------------------
# The breaker: open for 2 s after 2 failures; no pre-probe backoff (5 s)
# so that the recovery is the breaker's.
RECOVERY_S=2
up() {  # up NAME KEYFILE [EXTRA]: a grpc source on the hub
  printf '  %s: { type: grpc, target: "127.0.0.1:%s", mode: %s, tls: { ca_file: %s }, api_key_file: "%s", fallback: system, preprobe: false, timeout_ms: 5000, retry_count: 0, quota: { max_requests_per_minute: 0 }, breaker: { min_timeout_ms: 2000, recovery_window_s: %s, recovery_window_max_s: %s, max_consecutive_failures: 2 }%s }\n' \
    "$1" "${PORTOF:-$PORT}" "${MODE:-unary}" "${CAOF:-$C/ca.pem}" "$2" \
    "$RECOVERY_S" "$RECOVERY_S" "${3:-}"
}
node_conf() {  # node_conf NAME; sources on stdin
  mkdir -p "$T/$1"
  { cat <<YAML
socket: { path: $T/$1/qrsd.sock, mode: "0600", group: "" }
state_dir: $T/$1
YAML
    if [ -n "$stress" ]; then
      mkdir -m 0700 "$T/$1/journal"
      printf 'status_file: %s\njournal: { dir: %s }\n' "$T/$1/status.json" \
        "$T/$1/journal"
    else
      echo 'status_file: ""'
    fi
    cat <<YAML
sources:
  system: { type: system }
YAML
    cat; } > "$T/$1/qrsd.yaml"
}
NODEPIDS=
start_node() {
  start_qrsd "$T/$1.log" "$qrsd" -c "$T/$1/qrsd.yaml"
  NODEPIDS="$NODEPIDS $pid"
}
for i in 1 2 3; do
  case $i in 1) m=unary ;; 2) m=server_streaming ;; 3) m=bidi_streaming ;; esac
  { MODE=$m up hub "$K/node-$i.key"
    [ -z "$bench" ] || { source_up direct $m
                         PORTOF=$DPORT MODE=$m up devhub "$K/node-$i.key"; }
  } | node_conf node$i
  start_node node$i
done
# A fourth qrsd holds the misconfigured clients, one source each (with
# --stress: seven upstreams stopped at once, with no hub on EPORT).
{
  up tight "$K/tight.key"
  up spare "$K/spare.key"
  up wrongkey "$K/wrong.key"
  up nokey ""
  CAOF=$C/other.pem up untrusted "$K/spare.key"
  PORTOF=$EPORT up expired "$K/spare.key"
  printf '  plain: { type: grpc, target: "127.0.0.1:%s", insecure: true, api_key_file: "%s", fallback: system, preprobe: false, timeout_ms: 1000, retry_count: 0 }\n' "$PORT" "$K/spare.key"
} | node_conf probe
start_node probe
step "3 nodes (unary, server_streaming, bidi_streaming) and a probe node up"

ctl() { n=$1; shift; "$qrsctl" --socket "$T/$n/qrsd.sock" "$@"; }

# --- 1. every client served by the hub --------------------------------------
start_clients() {  # start_clients TAG DRAWS [LOOP]: CLIENTS clients per node
  cpids=
  for i in 1 2 3; do
    c=0
    while [ $c -lt "$CLIENTS" ]; do
      # a client: DRAWS draws on one connection, again and again with
      # LOOP until $T/stop exists; each run's status is kept
      (while :; do
         ctl node$i --timeout 10000 --json draw -n "$2" --source hub \
           >> "$T/$1.$i.$c.out" 2>> "$T/$1.$i.$c.err"
         echo $? >> "$T/$1.$i.$c.rc"
         [ -n "${3:-}" ] && [ ! -e "$T/stop" ] || break
       done) &
      cpids="$cpids $!"
      c=$((c + 1))
    done
  done
}
wait_clients() { for p in $cpids; do wait "$p"; done; }
check_clients() {  # check_clients TAG: every client ok, every draw labelled
  bad=$(grep -lv '^0$' "$T"/$1.*.rc)
  [ -z "$bad" ] || fail "client draws failed: $(cat $(echo "$bad" | sed 's/rc$/err/') | head -n 5)"
  runs=$(cat "$T"/$1.*.rc | wc -l)
  total=$(cat "$T"/$1.*.out | wc -l)
  [ "$total" -eq $((runs * $3)) ] || fail "$total draws in $runs runs of $3"
  echo "hub: $runs client runs of $3 draws, none failed"
  cat "$T"/$1.*.out > "$T/$1.all"
  # A draw is served by the hub, or by the fallback and labelled so.
  "$PY" - "$T/$1.all" "$2" <<'PY' || fail "draws of run $1 are not all served or labelled"
import json, sys
hub = fb = 0
for line in open(sys.argv[1]):
    d = json.loads(line)
    assert 0 < d["u"] < 1, d
    if d["served_by"] == "hub" and d["served_type"] == "grpc" and not d["fallback"]:
        hub += 1
    elif d["served_by"] == "system" and d["fallback"] is True:
        fb += 1
    else:
        sys.exit("unlabelled draw: %s" % line.strip())
print("hub: %d draws by the hub, %d by the labelled fallback" % (hub, fb))
if sys.argv[2] == "all-hub" and fb:
    sys.exit("%d fallback draws while the hub was up" % fb)
if sys.argv[2] == "some-fallback" and not fb:
    sys.exit("no fallback draw while the hub was down")
PY
  rm -f "$T"/$1.*.rc
}
# flood SECONDS: 24 StreamEntropy streams at once from key 'flood' (share:
# 4 streams), each asking again and again for SECONDS; exits 0 when the
# streams over the share were refused with RESOURCE_EXHAUSTED naming the
# limit, the others served, and no other error came.
flood() {
  "$PY" - "$PORT" "$C/ca.pem" "$(cat "$K/flood.key")" "$1" <<'PY'
import sys, threading, time
import grpc
port, ca, key = sys.argv[1], open(sys.argv[2], "rb").read(), sys.argv[3]
ch = grpc.secure_channel("127.0.0.1:" + port, grpc.ssl_channel_credentials(ca))
f = ch.stream_stream("/qr_entropy.EntropyService/StreamEntropy")
lock = threading.Lock()
out = {"ok": 0, "refused": 0, "other": []}
# the seconds of the flood begin once the channel is up (TLS handshake
# done): on a loaded machine the handshake alone took longer than a flood
grpc.channel_ready_future(ch).result(timeout=60)
print("hub: flood: connected", flush=True)
end = time.monotonic() + float(sys.argv[4])
def reqs():
    while time.monotonic() < end:
        yield b"\x08\x80\x08"        # bytes_needed = 1024
        time.sleep(0.002)
def one():
    while time.monotonic() < end:
        try:
            n = sum(1 for _ in f(reqs(), metadata=[("api-key", key)], timeout=10))
            with lock:
                out["ok"] += n
        except grpc.RpcError as e:
            with lock:
                if (e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                        and "api key 'flood': 4 streams open, its share (streams)" in e.details()):
                    out["refused"] += 1
                else:
                    out["other"].append("%s %s" % (e.code().name, e.details()))
            time.sleep(0.01)
ts = [threading.Thread(target=one) for _ in range(24)]
for t in ts: t.start()
for t in ts: t.join()
print("hub: flood: %d replies on its streams, %d streams refused, other errors: %s"
      % (out["ok"], out["refused"], out["other"][:3]))
sys.exit(0 if out["ok"] > 0 and out["refused"] > 0 and not out["other"] else 1)
PY
}

# --- --stress: every qrsd stopped after (or during) the flood ---------------
# rewritten NAME: NAME's status file was written after its qrsd began to
# stop (its log's last "stopping" line): the stop's last write.
rewritten() {
  "$PY" -c '
import datetime, json, sys
at = json.load(open(sys.argv[1]))["updated_at"]
stop = [l for l in open(sys.argv[2]) if "info: Terminated: stopping" in l][-1]
t = datetime.datetime.strptime(stop.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
t = t.replace(tzinfo=datetime.timezone.utc).timestamp()
sys.exit(0 if at >= t else "updated at %.3f, its stop began at %.3f" % (at, t))
' "$T/$1/status.json" "$T/$1.log" || fail "$1: status file not written at its stop"
}
# journalled NODE TAG: NODE's journal intact, without gap records, every
# draw its clients of round TAG were given among its entries, and the
# journal's sequence in its status file its last (the status file is
# written at the stop after the journal's last entries).
journalled() {
  "$audit" --journal "$T/$1/journal" > "$T/audit.out" 2>&1 ||
    fail "$1: journal not intact after SIGTERM: $(cat "$T/audit.out")"
  ! grep -q "gap records" "$T/audit.out" ||
    fail "$1: gap records in its journal: $(cat "$T/audit.out")"
  "$PY" - "$T/$1/status.json" "$T/audit.out" "$T"/$2.${1#node}.*.out <<'PY' ||
import json, re, sys
st = json.load(open(sys.argv[1]))
n = int(re.search(r"journal intact: (\d+) entries", open(sys.argv[2]).read()).group(1))
seen = max([json.loads(l)["journal_seq"] for f in sys.argv[3:] for l in open(f)] or [0])
assert st["journal"]["seq"] == n, "status file: seq %s, journal %d entries" % (st["journal"]["seq"], n)
assert 0 < seen <= n, "a client was given draw %d, the journal has %d" % (seen, n)
PY
    fail "$1: journal or status file not flushed at its stop"
}
stress_round() {  # stress_round N
  rm -f "$T/stop"
  flood 1.5 > "$T/flood.out" 2>&1 &
  FLOODPID=$!
  start_clients "s$1" "$DRAWS" loop
  case $(($1 % 4)) in
    1|3)  # after the flood: the hub first, or the nodes first
      wait "$FLOODPID" || fail "round $1: the flood: $(cat "$T/flood.out")"
      touch "$T/stop"
      wait_clients
      if [ $(($1 % 4)) = 1 ]; then
        stop_qrsd "$HUBPID"
        for p in $NODEPIDS; do stop_qrsd "$p"; done
      else
        for p in $NODEPIDS; do stop_qrsd "$p"; done
        stop_qrsd "$HUBPID"
      fi ;;
    *)    # during the flood, the nodes' clients drawing: the hub first
      wait_for $((200 * SCALE)) 0.05 "round $1: the flood did not connect" \
        grep -q "flood: connected" "$T/flood.out"
      sleep 0.5
      stop_qrsd "$HUBPID"
      wait "$FLOODPID"
      touch "$T/stop"
      wait_clients
      for p in $NODEPIDS; do stop_qrsd "$p"; done ;;
  esac
  check_clients "s$1" labelled "$DRAWS" > /dev/null
  rewritten hub
  rewritten probe
  for i in 1 2 3; do
    rewritten node$i
    journalled node$i "s$1"
  done
}
if [ -n "$stress" ]; then
  r=1
  while :; do
    stress_round $r
    step "round $r: every qrsd exited 0 on SIGTERM, status files and journals flushed"
    [ $r -lt "$stress" ] || break
    r=$((r + 1))
    start_hub
    NODEPIDS=
    for n in node1 node2 node3 probe; do start_node $n; done
  done
  echo "hub OK: $stress rounds in $(( $(now_ms) - T0 )) ms"
  exit 0
fi

start_clients up1 "$DRAWS"
wait_clients
check_clients up1 all-hub "$DRAWS"
step "$((3 * CLIENTS)) clients x $DRAWS draws, all served by the hub"
if [ -n "$bench" ]; then
  nodes=$T/node1/qrsd.sock,$T/node2/qrsd.sock,$T/node3/qrsd.sock
  echo "== the hub's source an upstream (a cloud QRNG): node -> hub -> source is two hops"
  "$bench" hub --clients "$CLIENTS" --nodes "$nodes" || exit $?
  echo "== the hub's source local (a device on the hub's machine): one hop each"
  "$bench" hub --clients "$CLIENTS" --nodes "$nodes" --source devhub
  exit $?
fi

# Server-amplified draws and bytes through the hub, nonce echo verified.
for i in 1 2 3; do
  out=$(ctl node$i --json draw -n 3 --source hub --amplifier server --salt 0a0b --step 7) ||
    fail "node$i: server draw failed: $out"
  echo "$out" | "$PY" -c '
import json, sys
for line in sys.stdin:
    d = json.loads(line)
    assert d["amplifier"] == "server" and not d["fallback"] and d["served_by"] == "hub", d
    assert d["echo_verified"] is True, d
' || fail "node$i: server draw not from the hub with its echo verified: $out"
  n=$(ctl node$i bytes -n 4096 --source hub | wc -c) || fail "node$i: bytes failed"
  [ "$n" -eq 4096 ] || fail "node$i: bytes: $n bytes, want 4096"
done
step "server draws (echo verified) and bytes through the hub on each node"

# --- 2. the hub killed and restarted mid-run --------------------------------
KDRAWS=5
start_clients kill "$KDRAWS" loop
sleep 0.5
kill -9 "$HUBPID"
wait "$HUBPID" 2>/dev/null
untrack "$HUBPID"
step "hub killed (SIGKILL) mid-run"
sleep 1
start_hub
T_UP=$(now_ms)
step "hub restarted"
# Back on the hub within the breaker's recovery window (plus a call, 2 s
# times SCALE), while the clients draw.
BACK_S=$((RECOVERY_S + 2 * SCALE))
for i in 1 2 3; do
  while :; do
    out=$(ctl node$i --json draw --source hub) || fail "node$i: draw failed after the restart"
    case $out in *'"served_by":"hub"'*'"fallback":false'*) break ;; esac
    [ $(( $(now_ms) - T_UP )) -lt $((BACK_S * 1000)) ] ||
      fail "node$i not back on the hub $BACK_S s after the restart: $out"
    sleep 0.1
  done
done
step "every node back on the hub $(( $(now_ms) - T_UP )) ms after the restart (recovery window ${RECOVERY_S} s)"
# A slow qrsd (SCALE > 1): a call of the first after the recovery may time
# out and open a node's breaker again; its clients draw on past one more
# window before their last draws are counted.
if [ "$SCALE" = 1 ]; then sleep 0.5; else sleep $((RECOVERY_S + 1)); fi
touch "$T/stop"
wait_clients
check_clients kill some-fallback "$KDRAWS"
# The clients' last draws, after the recovery, are the hub's again: 3 in
# 4 at least (with three copies of this test at once, one call in ten
# runs was refused RESOURCE_EXHAUSTED after the restart, reopening that
# node's breaker for a moment; its draws went to the fallback, labelled).
for i in 1 2 3; do
  n=0
  for f in "$T"/kill.$i.*.out; do
    tail -n 1 "$f" | grep -q '"served_by":"hub","fallback":false' && n=$((n + 1))
  done
  [ $((n * 4)) -ge $((CLIENTS * 3)) ] ||
    fail "node$i: only $n of its $CLIENTS clients' last draws are the hub's"
  echo "hub: node$i: $n of $CLIENTS clients' last draws by the hub"
done
step "the clients' last draws served by the hub"

# --- 3. a key over its quota, another unaffected ----------------------------
served() {  # served NODE SOURCE: the draw's served_by
  ctl "$1" --json draw --source "$2" | "$PY" -c 'import json, sys; d = json.load(sys.stdin); print(d["served_by"] + (" fallback" if d["fallback"] else ""))'
}
failure() {  # failure NODE SOURCE: the source's last failure
  ctl "$1" --json sources | "$PY" -c '
import json, sys
for s in json.load(sys.stdin)["sources"]:
    if s["name"] == sys.argv[1]:
        print(s["last_failure"])' "$2"
}
# The probe's warm-up fetch was one of the 3 (before the hub's restart:
# the minute's count persists, written ahead): 1 or 2 draws are left.
ok=0
while [ "$(served probe tight)" = "tight" ]; do
  ok=$((ok + 1))
  [ $ok -le 3 ] || fail "key 'tight' over 3 requests/min still served"
done
[ $ok -ge 1 ] || fail "key 'tight' refused before its first draw"
f=$(failure probe tight)
for n in 1 2 3; do
  [ "$(served probe tight)" = "system fallback" ] || fail "key 'tight' served again within the minute"
done
case $f in
  *"RESOURCE_EXHAUSTED: api key 'tight': quota exceeded (requests per minute: 3)"*) ;;
  *) fail "key over its quota: '$f'" ;;
esac
for n in 1 2 3 4 5; do
  [ "$(served probe spare)" = "spare" ] || fail "key 'spare' affected by 'tight''s quota"
done
step "key 'tight' refused: $f; key 'spare' unaffected"

# --- 4. refused clients, each with a clear error ----------------------------
expect_refused() {  # expect_refused SOURCE PATTERN
  [ "$(served probe "$1")" = "system fallback" ] || fail "$1: served by the hub"
  f=$(failure probe "$1")
  echo "$f" | grep -Eq "$2" || fail "$1: error '$f' does not match '$2'"
  step "$1 refused: $f"
}
expect_refused wrongkey "^gRPC status 16 UNAUTHENTICATED: unknown api key \(metadata 'api-key'\)"
expect_refused nokey "^gRPC status 16 UNAUTHENTICATED: missing api key \(metadata 'api-key'\)"
expect_refused untrusted "^gRPC status 14 UNAVAILABLE: .*Ssl handshake failed.*certificate verify failed$"
expect_refused expired "^gRPC status 14 UNAVAILABLE: .*Ssl handshake failed.*certificate verify failed$"
# The hub closes a connection that does not start with a TLS handshake.
expect_refused plain "^gRPC status 14 UNAVAILABLE: .*Socket closed$"
grep -q "wrong version number" "$T/hub.log" ||
  fail "the hub did not log the plaintext client's failed handshake"

# The same through Python grpc: status codes and the TLS reasons.
"$PY" - "$PORT" "$EPORT" "$C" "$(cat "$K/spare.key")" <<'PY' || fail "python grpc checks"
import sys
import grpc
port, eport, c, key = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ca = open(c + "/ca.pem", "rb").read()
other = open(c + "/other.pem", "rb").read()
def call(target, creds, md):
    ch = (grpc.secure_channel(target, creds) if creds
          else grpc.insecure_channel(target))
    f = ch.unary_unary("/qr_entropy.EntropyService/GetEntropy")
    try:
        # GetEntropyRequest: field 1 bytes_needed = 32
        r = f(b"\x08\x20", metadata=md, timeout=5)
        return grpc.StatusCode.OK, "%d bytes" % len(r)
    except grpc.RpcError as e:
        return e.code(), e.details()
    finally:
        ch.close()
t = "127.0.0.1:" + port
tls = grpc.ssl_channel_credentials(ca)
cases = [
    ("a good key", t, tls, [("api-key", key)], grpc.StatusCode.OK, "bytes"),
    ("a wrong key", t, tls, [("api-key", "nope")], grpc.StatusCode.UNAUTHENTICATED, "unknown api key"),
    ("no key", t, tls, [], grpc.StatusCode.UNAUTHENTICATED, "missing api key"),
    ("a certificate from another CA", t, grpc.ssl_channel_credentials(other),
     [("api-key", key)], grpc.StatusCode.UNAVAILABLE, "CERTIFICATE_VERIFY_FAILED|certificate verify failed|handshake"),
    ("an expired certificate", "127.0.0.1:" + eport, tls, [("api-key", key)],
     grpc.StatusCode.UNAVAILABLE, "CERTIFICATE_VERIFY_FAILED|certificate verify failed|expired|handshake"),
    ("plaintext on the TLS port", t, None, [("api-key", key)],
     grpc.StatusCode.UNAVAILABLE, "Socket closed|Connection reset|failed to connect"),
]
import re
bad = 0
for what, target, creds, md, want, pat in cases:
    code, details = call(target, creds, md)
    ok = code == want and re.search(pat, details or "")
    print("hub: python grpc, %s: %s %s" % (what, code.name, details))
    if not ok:
        print("hub: python grpc, %s: want %s matching %r" % (what, want.name, pat),
              file=sys.stderr)
        bad += 1
sys.exit(1 if bad else 0)
PY
step "python grpc: each refused with its status"
# A qr-sampler style client (the four RPCs, by hand-encoded messages) with
# TLS and a key: every answer checked.
here=$(dirname "$0")
"$PY" "$here/grpc_client.py" "127.0.0.1:$PORT" "$(cat "$K/spare.key")" "$C/ca.pem" ||
  fail "grpc_client.py over TLS with a key"
step "grpc_client.py: GetEntropy, StreamEntropy, GetDraw, StreamDraws over TLS with a key"

# --- a flood of streams from one key, the nodes' draws unaffected ----------
# 24 StreamEntropy streams at once from key 'flood' (share: 4 streams),
# each asking again and again, while every node's 16 clients draw: the
# streams over the share are refused with RESOURCE_EXHAUSTED naming the
# limit; no node draw fails, and none is refused for the flood's key.
flood 2.0 > "$T/flood.out" 2>&1 &
FLOODPID=$!
sleep 0.3
rm -f "$T/stop"
start_clients flood "$DRAWS" loop
wait "$FLOODPID"; frc=$?
touch "$T/stop"
wait_clients
cat "$T/flood.out"
[ $frc -eq 0 ] || fail "the flood's streams were not refused over their share as expected"
check_clients flood labelled "$DRAWS"
for i in 1 2 3; do
  ! grep -q "api key 'flood'" "$T/node$i.log" || fail "node$i refused for the flood's key"
done
step "a flood of streams from key 'flood' refused over its share; the nodes' draws served, none refused for it"

# --- 5. the hub's status lists the keys' use, never a key --------------------
sleep 1.2   # the status file is rewritten every second
"$PY" - "$T/hub/status.json" <<'PY' || fail "hub status file: $(cat "$T/hub/status.json")"
import json, sys
st = json.load(open(sys.argv[1]))
keys = {k["name"]: k for k in st["api_keys"]}
for n in ("node-1", "node-2", "node-3", "tight", "spare"):
    assert n in keys, "key %s missing from api_keys" % n
for n in ("node-1", "node-2", "node-3", "spare"):
    assert keys[n]["requests"] > 0 and keys[n]["refused_quota"] == 0, keys[n]
# idle: no request in flight, no stream but node-3's bidi one (no share
# leaks through the hub's restart or the refusals)
for n, k in keys.items():
    assert k["in_flight"] == 0 and k["streams"] <= (1 if n == "node-3" else 0), k
assert keys["tight"]["refused_quota"] >= 1 and keys["tight"]["minute_requests"] <= 3, keys["tight"]
print("hub: status api_keys: " + ", ".join(
    "%s %d requests (%d streams, %d in flight)" % (n, k["requests"], k["streams"], k["in_flight"])
    for n, k in sorted(keys.items())))
PY
for n in node-1 node-2 node-3 tight spare flood wrong; do
  k=$(cat "$K/$n.key")
  for f in "$T"/*.log "$T"/hub/status.json; do
    grep -qF -- "$k" "$f" && fail "the key of $n appears in $f"
  done
done
# Every daemon stops cleanly on SIGTERM (under ASan: no leak, no error).
for p in $HUBPID $EXPPID $NODEPIDS; do
  stop_qrsd "$p"
done
echo "hub OK in $(( $(now_ms) - T0 )) ms"
