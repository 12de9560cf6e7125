#!/bin/sh
# Usage: k8s.sh DIR QRSCTL
# The Kubernetes manifests in DIR (deploy/k8s), offline:
#   1. `kubectl kustomize DIR` renders them;
#   2. kubernetes-validate --strict checks every rendered resource
#      against the Kubernetes schemas it ships (an unknown field is an
#      error, not a warning);
#   3. the sandbox the systemd unit has holds for every pod: non-root,
#      read-only root filesystem, no capabilities, no privilege
#      escalation, seccomp RuntimeDefault; the DaemonSet runs on GPU nodes
#      with its socket directory on a hostPath; probes run qrsctl;
#   4. each qrsd.yaml of the ConfigMaps passes `qrsctl validate`;
#   5. and the checks bite: broken copies of DIR (an unknown field, a
#      wrong type, a container that may escalate, a broken qrsd.yaml)
#      are each refused.
# kubernetes-validate comes from ./setup.sh k8s (a venv in
# ~/.cache/qrs/kv-venv, or $QRS_K8S_VALIDATE); kubectl from PATH.
set -u
dir=$1 qrsctl=$2
PY=/usr/bin/python3   # Debian's, with python3-yaml
KV=${QRS_K8S_VALIDATE:-$HOME/.cache/qrs/kv-venv/bin/kubernetes-validate}
[ -x "$KV" ] || KV=$(command -v kubernetes-validate) ||
  { echo "k8s: kubernetes-validate not found: run ./setup.sh k8s" >&2; exit 1; }
command -v kubectl >/dev/null ||
  { echo "k8s: kubectl not found: run ./setup.sh k8s (Debian's kubernetes-client)" >&2; exit 1; }
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
fail() { echo "k8s: FAIL: $*" >&2; exit 1; }

# check DIR: 0 when DIR passes every check, else 1 with the reason on
# stderr and in $T/why.
check() {
  d=$1 out=$T/rendered.yaml
  : > "$T/why"
  kubectl kustomize "$d" > "$out" 2> "$T/why" || return 1
  "$KV" --strict --quiet "$out" > "$T/kv.out" 2>&1 ||
    { cat "$T/kv.out" > "$T/why"; return 1; }
  # kubernetes-validate exits 0 on a resource of a kind it has no schema
  # for, with a warning: none is expected here.
  ! grep -qi 'warn\|error\|fail' "$T/kv.out" ||
    { cat "$T/kv.out" > "$T/why"; return 1; }
  rm -rf "$T/conf"
  mkdir "$T/conf"
  "$PY" - "$out" "$T/conf" > "$T/policy.out" 2>&1 <<'PY' ||
import sys
import yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
errors = []
kinds = {}
for d in docs:
    kinds.setdefault(d["kind"], []).append(d)
    if d["kind"] == "ConfigMap":
        for k, v in d.get("data", {}).items():
            open("%s/%s-%s" % (sys.argv[2], d["metadata"]["name"], k), "w").write(v)
    if d["kind"] not in ("DaemonSet", "Deployment"):
        continue
    name = "%s/%s" % (d["kind"], d["metadata"]["name"])
    pod = d["spec"]["template"]["spec"]
    psc = pod.get("securityContext", {})
    if psc.get("seccompProfile", {}).get("type") != "RuntimeDefault":
        errors.append(name + ": pod seccompProfile is not RuntimeDefault")
    if psc.get("runAsNonRoot") is not True or not psc.get("runAsUser"):
        errors.append(name + ": pod may run as root")
    if pod.get("automountServiceAccountToken") is not False:
        errors.append(name + ": mounts a service account token")
    for c in pod.get("initContainers", []) + pod["containers"]:
        cn = "%s container %s" % (name, c["name"])
        sc = c.get("securityContext", {})
        if sc.get("readOnlyRootFilesystem") is not True:
            errors.append(cn + ": root filesystem not read-only")
        if sc.get("allowPrivilegeEscalation") is not False:
            errors.append(cn + ": allowPrivilegeEscalation is not false")
        if sc.get("privileged"):
            errors.append(cn + ": privileged")
        if sc.get("capabilities", {}).get("drop") != ["ALL"] or \
                sc.get("capabilities", {}).get("add"):
            errors.append(cn + ": capabilities not all dropped")
        if sc.get("runAsUser") == 0:
            errors.append(cn + ": runs as root")
        for p in ("readinessProbe", "livenessProbe"):
            cmd = c.get(p, {}).get("exec", {}).get("command", [])
            if not cmd or cmd[0] != "qrsctl":
                errors.append("%s: %s does not run qrsctl" % (cn, p))
        if "resources" not in c or "limits" not in c["resources"]:
            errors.append(cn + ": no resource limits")
for kind in ("Namespace", "DaemonSet", "Deployment", "Service",
             "ConfigMap", "PersistentVolumeClaim"):
    if kind not in kinds:
        errors.append("no " + kind)
for ds in kinds.get("DaemonSet", []):
    pod = ds["spec"]["template"]["spec"]
    if not pod.get("nodeSelector"):
        errors.append("the DaemonSet has no nodeSelector (GPU nodes)")
    hp = [v for v in pod.get("volumes", []) if "hostPath" in v]
    if not any(v["hostPath"]["path"] == "/run/qrsd" for v in hp):
        errors.append("the DaemonSet does not share /run/qrsd (hostPath)")
    if len(hp) != 1:
        errors.append("the DaemonSet mounts %d hostPaths, want 1" % len(hp))
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY
    { cat "$T/policy.out" > "$T/why"; return 1; }
  n=0
  for f in "$T"/conf/*; do
    "$qrsctl" validate "$f" > "$T/validate.out" 2>&1 ||
      { cat "$T/validate.out" > "$T/why"; return 1; }
    n=$((n + 1))
  done
  [ $n -ge 2 ] || { echo "$n qrsd.yaml in the ConfigMaps, want 2" > "$T/why"; return 1; }
  return 0
}

check "$dir" || fail "$dir: $(cat "$T/why")"
echo "k8s: $dir renders ($(grep -c '^kind:' "$T/rendered.yaml") resources) and passes kubernetes-validate $("$KV" --version) --strict"
"$KV" --strict "$T/rendered.yaml" | sed -n 's/^INFO .* passed for resource \(.*\) against.*/k8s:   \1/p'
echo "k8s: the sandbox holds for every pod; both qrsd.yaml pass qrsctl validate"

# The checks must refuse broken copies.
broken() {  # broken WHAT FILE SED-EXPRESSION PATTERN-OF-THE-REASON
  rm -rf "$T/b"
  cp -r "$dir" "$T/b"
  sed -i "$3" "$T/b/$2"
  cmp -s "$dir/$2" "$T/b/$2" && fail "broken copy ($1): the edit did nothing"
  check "$T/b" && fail "a broken copy ($1) passed"
  grep -Eq "$4" "$T/why" || fail "broken copy ($1) refused for another reason: $(cat "$T/why")"
  echo "k8s: refused as expected: $1: $(grep -E "$4" "$T/why" | head -n 1)"
}
broken "an unknown field" hub.yaml 's/^  replicas: 1$/  replicas: 1\n  replica: 1/' 'replica'
broken "a wrong type" hub.yaml 's/containerPort: 50051/containerPort: "fifty"/' 'containerPort|fifty|integer'
broken "privilege escalation allowed" node.yaml 's/allowPrivilegeEscalation: false/allowPrivilegeEscalation: true/' 'allowPrivilegeEscalation is not false'
broken "no seccomp profile" hub.yaml 's/type: RuntimeDefault/type: Unconfined/' 'seccompProfile is not RuntimeDefault'
broken "a broken qrsd.yaml" node-qrsd.yaml 's/mode: bidi_streaming/mode: bidi/' 'mode'
echo "k8s OK"
