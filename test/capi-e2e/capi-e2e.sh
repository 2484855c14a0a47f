#!/usr/bin/env bash
# Make glue of CAPI's own provider test suite (test/capi-e2e, see README.md):
#
#   capi-e2e.sh build    the Ginkgo test binary, cached by content hash in $CAPKK_CACHE/capi-e2e/<hash>/
#   capi-e2e.sh flavors OUT   our provider's repository in OUT with every flavor below (to check renderings)
#   capi-e2e.sh run      build, then run it against the run named by CAPI_E2E_FROM:
#                          sandbox:NAME  the local management plane with the sandbox hosts of `test/e2e/e2e.sh hosts`
#                                        (E2E_NAME=NAME; make capi-e2e-hosts): QuickStartSpec by default, default
#                                        flavor and the specs' own made from it
#                          real:NAME     a kept `test/vm/real.sh clusterctl` run (REAL_NAME=NAME, REAL_KEEP=1,
#                                        REAL_TO=clusterctl_init, REAL_EXTRA_VMS=2 or 3): its VM cluster, where
#                                        clusterctl init installed every provider, is the bootstrap cluster; the
#                                        fleet's VMs in no cluster are the spec clusters' hosts; "tcg" flavors
#                          plane:NAME    a kept `test/vm/real.sh clusterctl` run stopped before its own cluster
#                                        (REAL_NAME=NAME REAL_KEEP=1 REAL_TO=serve_up REAL_VMS=2 [REAL_EXTRA_VMS=N]
#                                        MANAGER_ALL_NAMESPACES=1): the local plane, with CAPI's controllers and ours
#                                        as processes, is the bootstrap cluster; the fleet's first hosts are the
#                                        spec clusters' hosts
#
# HOSTS (real:NAME and plane:NAME): what the kept run's hosts are, as real.sh's HOSTS says. containers (the
# default, as real.sh's): node containers at native speed, the "ctr" flavors (flannel as the pod network, every
# host may take either role); vms: TCG VMs, the "tcg" flavors (static per-node routes; SelfHostedSpec on one
# untainted control-plane node, "tcg-single", in the plane mode). The glue fails when the kept run's fleet
# (its state.json) is of the other source.
#
# The specs are the Describes of the *_test.go files, read from there (spec_table): CAPI_E2E_FOCUS selects them by
# their Describe text (the tag it ends with: QuickStart, SelfHosted, MDRollout, MDRemediation, K8sUpgrade), and
# the line right above each Describe, `// capi-e2e.sh hosts: N (WHY)`, is the number of hosts it needs. The specs
# run one after another and each deletes its cluster, so a run needs as many as its largest spec; the glue counts
# them before the build and fails naming the spec when the kept run has fewer. K8sUpgrade also needs the previous
# Kubernetes set served by the kept run (REAL_PREV=1) and a control-plane load balancer (started here).
#
# Environment: CAPI_E2E_FOCUS (a Ginkgo focus regexp, default QuickStart|SelfHosted on real hosts, QuickStart on
# sandbox hosts; `.` runs every spec; set but empty fails), CAPI_E2E_OUT (default target/capi-e2e/NAME: artifacts,
# the clusterctl configuration, the flavors), CAPI_E2E_ARGS (more arguments for the binary), HOSTS, VERSION.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
VERSION=${VERSION:-v0.1.0}
export CAPKK_CACHE CLUSTERCTL_DISABLE_VERSIONCHECK=true CAPKK_VERSION=$VERSION
log() { echo "[capi-e2e $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# shellcheck source=SCRIPTDIR/../lib/tcp-lb.sh
source "$ROOT/test/lib/tcp-lb.sh"

# Bump when the build command changes in a way the hashed files do not show.
RECIPE=1
binary_hash() {
  {
    cd "$HERE" && LC_ALL=C sha256sum go.mod go.sum ./*.go
    go env GOVERSION
    echo "recipe=$RECIPE"
  } | sha256sum | cut -c1-16
}

# build: prints the binary's path. Compiling takes minutes cold: nice (the machine is shared), a line every 30 s.
build() {
  command -v go >/dev/null || die "go is required (make deps)"
  local dir bin t0 pid rc=0
  dir=$CAPKK_CACHE/capi-e2e/$(binary_hash)
  bin=$dir/capi-e2e.test
  mkdir -p "$dir"
  exec 8>"$dir/.build.lock"
  flock 8
  if [ -x "$bin" ]; then
    log "test binary cached: $bin"
    echo "$bin"
    return 0
  fi
  log "building the test binary (go test -c, nice; cluster-api/test $(awk '$1 == "sigs.k8s.io/cluster-api/test" {print $2}' "$HERE/go.mod")) into $dir"
  t0=$(date +%s)
  (cd "$HERE" && nice -n 10 go test -c -vet=off -trimpath -o "$dir/.capi-e2e.test.tmp" .) >"$dir/build.log" 2>&1 &
  pid=$!
  while ! wait_secs 30 "$pid"; do
    log "  still compiling, $(($(date +%s) - t0))s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  done
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] || { tail -n 30 "$dir/build.log" >&2; die "go test -c failed (exit $rc, log $dir/build.log)"; }
  mv -f "$dir/.capi-e2e.test.tmp" "$bin"
  echo "$(($(date +%s) - t0))s, load $(cut -d' ' -f1-3 /proc/loadavg)" >"$dir/build-time.txt"
  log "built in $(($(date +%s) - t0))s: $bin"
  echo "$bin"
}
wait_secs() { # wait_secs N PID: 0 once PID has exited, 1 after N seconds while it still runs
  local _
  for _ in $(seq "$1"); do
    kill -0 "$2" 2>/dev/null || return 0
    sleep 1
  done
  ! kill -0 "$2" 2>/dev/null
}

mgmt_path() { # the management plane's kubectl and clusterctl (release-manifests.sh and config.sh run them)
  local bin_dir
  bin_dir=$(bash -c 'source "$1/test/mgmt/scripts/common.sh" && echo "$BIN_DIR"' _ "$ROOT")
  [ -x "$bin_dir/clusterctl" ] || die "clusterctl not built: make mgmt-bin"
  export PATH=$bin_dir:$PATH
}

# spec_table: the specs, read from the *_test.go files (their one source), a line each: TAG|HOSTS|WHY|TEXT, TEXT
# the Describe text. Every Describe must be a top-level `var _ = Describe("TEXT [Tag]", func() {` with, on the
# line right above it, `// capi-e2e.sh hosts: N (WHY)`; fails naming the file and line of a Describe it cannot
# read, of one without that line, and of a tag used twice.
spec_table() {
  (cd "$HERE" && LC_ALL=C awk '
    FNR == 1 { prev = "" }
    /Describe[(]/ && !/^[ \t]*\/\// {
      where = FILENAME ":" FNR
      if ($0 !~ /^var _ = Describe[(]"[^"\\|]* \[[A-Za-z0-9]+\]", func[(][)] [{]$/) {
        print where ": a Describe capi-e2e.sh cannot read; expected: var _ = Describe(\"TEXT [Tag]\", func() {" > "/dev/stderr"
        bad = 1; prev = $0; next
      }
      text = $0; sub(/^var _ = Describe[(]"/, "", text); sub(/", func[(][)] [{]$/, "", text)
      tag = text; sub(/.*\[/, "", tag); sub(/\]$/, "", tag)
      if (prev !~ /^\/\/ capi-e2e\.sh hosts: [1-9][0-9]* [(][^|]*[)]$/) {
        print where ": no \"// capi-e2e.sh hosts: N (WHY)\" line right above the Describe of [" tag "]" > "/dev/stderr"
        bad = 1; prev = $0; next
      }
      if (tag in seen) { print where ": the tag [" tag "] again (first at " seen[tag] ")" > "/dev/stderr"; bad = 1 }
      seen[tag] = where
      n = prev; sub(/^\/\/ capi-e2e\.sh hosts: /, "", n); why = n; sub(/ .*/, "", n)
      sub(/^[0-9]+ [(]/, "", why); sub(/[)]$/, "", why)
      print tag "|" n "|" why "|" text; count++
    }
    { prev = $0 }
    END {
      if (!count) { print "no Describe in the *_test.go files" > "/dev/stderr"; bad = 1 }
      exit bad
    }' ./*_test.go)
}
# focused TEXT: whether FOCUS selects the spec whose Describe text is TEXT, as Ginkgo's focus does (a regexp
# matched against the spec's text: focus by the tags, e.g. MDRollout|K8sUpgrade, or by any part of the text).
focused() { [[ $1 =~ $FOCUS ]]; }

# The specs whose clusters have 3 control planes (the ha flavor's endpoint the provider serves): node containers
# only. On two TCG cores a control-plane join does not pass (docs/upgrades.md), and the tcg flavors' static
# per-node routes know one control plane.
CONTAINERS_ONLY="HA KCPRemediation"

# plan_specs: from FOCUS, NEED_HOSTS (the most any focused spec needs) and NEED_WHY; UPGRADE, SELF_HOSTED, ROLLOUT,
# KCP_REMEDIATION (1 when focused) and NAMES (the focused tags). Fails when FOCUS is empty or selects none of the
# specs.
plan_specs() {
  local table tag n why text tags=() names=()
  NEED_HOSTS=0 NEED_WHY="" UPGRADE=0 SELF_HOSTED=0 ROLLOUT=0 KCP_REMEDIATION=0
  [ -n "$FOCUS" ] ||
    die "CAPI_E2E_FOCUS is set but empty: unset it for the default, or select specs by tag (e.g. QuickStart, MDRollout|K8sUpgrade; . for all)"
  table=$(spec_table) || die "cannot read the specs from $HERE/*_test.go (above)"
  while IFS='|' read -r tag n why text; do
    tags+=("$tag")
    focused "$text" || continue
    names+=("$tag")
    [ "$tag" != K8sUpgrade ] || UPGRADE=1
    [ "$tag" != SelfHosted ] || SELF_HOSTED=1
    [ "$tag" != MDRollout ] || ROLLOUT=1
    [ "$tag" != KCPRemediation ] || KCP_REMEDIATION=1
    if [ "$n" -gt "$NEED_HOSTS" ]; then NEED_HOSTS=$n NEED_WHY="$tag: $why"; fi
  done <<<"$table"
  # The setup here names these specs by tag: a tag renamed in its *_test.go must not skip that setup silently.
  for tag in K8sUpgrade SelfHosted MDRollout KCPRemediation $CONTAINERS_ONLY; do
    [[ " ${tags[*]} " == *" $tag "* ]] ||
      die "capi-e2e.sh sets up the spec tagged [$tag], which no Describe of $HERE/*_test.go has (tags: ${tags[*]})"
  done
  [ "${#names[@]}" -gt 0 ] || die "CAPI_E2E_FOCUS='$FOCUS' selects none of the specs (tags: ${tags[*]})"
  NAMES=" ${names[*]} "
  log "specs: ${names[*]}; hosts needed: $NEED_HOSTS ($NEED_WHY)"
}

# containers_only_check: the focused specs that need node containers, refused on VMs and sandbox hosts (naming
# them and why).
containers_only_check() {
  local tag bad=()
  [ "$HOSTS" != containers ] || return 0
  for tag in $CONTAINERS_ONLY; do [[ $NAMES != *" $tag "* ]] || bad+=("$tag"); done
  [ ${#bad[@]} = 0 ] ||
    die "${bad[*]}: 3 control planes behind the ha flavor's endpoint, run on node containers only (HOSTS=containers; these hosts: $HOSTS): a control-plane join does not pass on two TCG cores (docs/upgrades.md), and the kubeadm simulator refuses one"
}

# MDRollout sets Machine taints, which CAPI's webhooks refuse unless its core and KubeadmControlPlane managers run
# with the alpha feature gate MachineTaintPropagation (CAPD's e2e config enables it). A server-side dry run of a
# MachineDeployment and a KubeadmControlPlane with a taint (nothing is stored) fails naming the gate when it is off.
taint_gate_check() {
  local out
  out=$(kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" create --dry-run=server -o name -f - 2>&1 <<'YAML' || true
apiVersion: v1
kind: List
items:
- apiVersion: cluster.x-k8s.io/v1beta2
  kind: MachineDeployment
  metadata: {name: capi-e2e-taint-gate-probe, namespace: default}
  spec:
    clusterName: capi-e2e-taint-gate-probe
    selector: {matchLabels: {capi-e2e: probe}}
    template:
      metadata: {labels: {capi-e2e: probe}}
      spec:
        clusterName: capi-e2e-taint-gate-probe
        bootstrap: {dataSecretName: capi-e2e-taint-gate-probe}
        infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: KKMachineTemplate, name: capi-e2e-taint-gate-probe}
        taints: [{key: capi-e2e-probe, value: v, effect: PreferNoSchedule, propagation: Always}]
- apiVersion: controlplane.cluster.x-k8s.io/v1beta2
  kind: KubeadmControlPlane
  metadata: {name: capi-e2e-taint-gate-probe, namespace: default}
  spec:
    replicas: 1
    version: v1.36.3
    machineTemplate:
      spec:
        infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: KKMachineTemplate, name: capi-e2e-taint-gate-probe}
        taints: [{key: capi-e2e-probe, value: v, effect: PreferNoSchedule, propagation: Always}]
YAML
  )
  if grep -q MachineTaintPropagation <<<"$out"; then
    die "MDRollout needs CAPI's feature gate MachineTaintPropagation on the bootstrap cluster's core and KubeadmControlPlane managers (README.md: the plane's --feature-gates, or EXP_MACHINE_TAINT_PROPAGATION=true for clusterctl init): $(grep -m1 MachineTaintPropagation <<<"$out")"
  fi
  log "MachineTaintPropagation: no refusal of Machine taints in a server-side dry run on the bootstrap cluster"
}

# Commands run when the glue exits, in the order registered (the plane's inventory, the load balancer).
EXIT_CMDS=()
on_exit() { EXIT_CMDS+=("$*"); }
run_exit_cmds() {
  local c
  for c in "${EXIT_CMDS[@]}"; do eval "$c" || true; done
}
trap run_exit_cmds EXIT

# sandbox:NAME: what `test/e2e/e2e.sh hosts` left (its hosts.env); our provider's repository with the specs' flavors.
from_sandbox() {
  local work=${E2E_WORK:-$ROOT/target/e2e/$1} have
  [ -s "$work/hosts.env" ] || die "no $work/hosts.env: run 'make capi-e2e-hosts' (test/e2e/e2e.sh hosts, E2E_NAME=$1) first"
  set -a
  # shellcheck disable=SC1091
  source "$work/hosts.env"
  set +a
  have=$(python3 -c 'import sys, yaml; print(len(yaml.safe_load(sys.argv[1])))' "$KUBEKEY_INSTANCES")
  [ "$have" -ge "$NEED_HOSTS" ] ||
    die "$work/hosts.env has $have host(s); the focused specs need $NEED_HOSTS ($NEED_WHY)"
  sandbox_repository
  export CAPI_E2E_FLAVOR=""
  # The e2e config's intervals are for TCG VMs; here a control plane is Running within a minute.
  export CAPI_E2E_INTERVAL_MAX=${CAPI_E2E_INTERVAL_MAX:-10m}
  # Every spec waits for its control plane first, which KubeadmControlPlane never reports ready on the kubeadm
  # simulator (no static Pods, no etcd Pod to reach: QuickStartSpec stops there, README.md). Past that point:
  # SelfHostedSpec's clusterctl init needs a kubelet to run the providers' Pods; K8sUpgrade starts at a version
  # the test mirror has no simulator for, and its control-plane rollout is a control-plane join, which the
  # simulator refuses.
  [ "$FOCUS" = QuickStart ] ||
    log "note: CAPI_E2E_FOCUS=$FOCUS on sandbox hosts: every spec stops where QuickStartSpec does (the control plane never reported ready without kubeadm's static Pods); see README.md"
  log "sandbox:$1: bootstrap cluster = the local management plane ($CAPI_E2E_KUBECONFIG), hosts of $work/hosts.env, default flavor"
}

# Our provider's repository under OUT (the one test/e2e/e2e.sh made, from this tree) with the specs' flavors
# made from the default template: kcp-md-taints and md-remediation by flavors.py, upgrades the default itself.
sandbox_repository() {
  "$ROOT/test/release/release-manifests.sh" --local-config "$OUT/clusterctl" "$VERSION" "ghcr.io/capkk-rs/capkk-manager:$VERSION" >/dev/null
  CCONF=$OUT/clusterctl/clusterctl.yaml
  sandbox_flavors "$OUT/clusterctl/infrastructure-kubekey/$VERSION"
}
sandbox_flavors() { # sandbox_flavors DIR: the specs' flavors from the default template into the repository DIR
  local f
  for f in kcp-md-taints md-remediation; do
    python3 "$HERE/flavors.py" "$ROOT/templates/cluster-template.yaml" "$1/cluster-template-$f.yaml" "$f"
  done
  cp "$ROOT/templates/cluster-template.yaml" "$1/cluster-template-upgrades.yaml"
}

# spec_env WORK STATE [CLUSTER_YAML]: what both VM modes take from a kept real.sh run (WORK its work dir, STATE
# its fleet): the node artifacts' versions, the bridge mirror and registry, the hosts (hosts.py, as many as the
# focused specs need), the template's variables (clusterctl reads them from the environment) and the suite's
# settings.
spec_env() {
  local work=$1 hosts
  shift
  # shellcheck disable=SC1091
  source "$CAPKK_CACHE/node-artifacts/current.env"
  # shellcheck disable=SC1091
  source "$work/serve/serve.env"
  # shellcheck disable=SC1091
  source "$work/serve/registry.cred"
  hosts=$(python3 "$HERE/hosts.py" "$@" --hosts "$NEED_HOSTS") ||
    die "the focused specs need $NEED_HOSTS hosts ($NEED_WHY); see README.md for the kept run that has them"
  set -a
  eval "$hosts"
  set +a
  # shellcheck disable=SC2153 # HOSTS_SOURCE: from hosts.py
  [ "$HOSTS_SOURCE" = "$HOSTS" ] ||
    die "the kept run's hosts are $HOSTS_SOURCE (its state.json), HOSTS=$HOSTS: run with HOSTS=$HOSTS_SOURCE, or keep a run with HOSTS=$HOSTS"
  export KUBERNETES_VERSION=$KUBE_VERSION NODE_REGISTRY CONTAINERD_VERSION RUNC_VERSION CRICTL_VERSION PAUSE_VERSION
  # The fleet's 198.19.N.0/24 belongs to the management cluster's Pods and Services; these exist only inside the
  # spec cluster's hosts (the bridge CNI and flannel masquerade what leaves a node). On VMs each node's static
  # bridge CNI takes a /26; on node containers flannel takes each Node's /27 (ctr flavors: up to 8 Nodes).
  export POD_CIDR=10.244.0.0/24 SERVICE_CIDR=10.96.0.0/24 CP_POD_CIDR=10.244.0.0/26 WORKER_POD_CIDR=10.244.0.64/26
  export CAPI_E2E_REGISTRY_USER=$REGISTRY_USER CAPI_E2E_REGISTRY_PASSWORD=$REGISTRY_PASSWORD
  if [ "$HOSTS" = containers ]; then
    # The ctr flavors: flannel's image from the node artifacts' registry; the ha flavor's endpoint (a VIP on the
    # fleet's bridge outside the hosts' addresses, .11 and up, as real.sh's ha mode takes it) on the node
    # containers' eth0.
    [ -n "${FLANNEL_IMAGE_PATH:-}" ] || die "node artifacts: FLANNEL_IMAGE_PATH missing in current.env (make node-artifacts)"
    export FLANNEL_IMAGE=$NODE_REGISTRY/$FLANNEL_IMAGE_PATH CONTROL_PLANE_VIP=${BRIDGE_ADDRESS%.*}.250 VIP_INTERFACE=eth0
    # The e2e config's intervals are for TCG VMs (an hour for a control plane); node containers run at native
    # speed (a control plane in minutes even at load 10), so a spec that cannot pass fails in minutes, not hours.
    export CAPI_E2E_INTERVAL_MAX=${CAPI_E2E_INTERVAL_MAX:-20m}
  fi
  [ "$UPGRADE" = 0 ] || upgrade_env
}

# K8sUpgrade: the two Kubernetes versions and the tags (the node artifacts' sets), the kept run serving the older
# one (REAL_PREV=1: its mirror and registry, its binaries in the component), and the control-plane load balancer
# the upgrades flavor's endpoint names, in front of the hosts that may hold the control plane.
upgrade_env() {
  local prev=$CAPKK_CACHE/node-artifacts/prev.env
  [ -s "$prev" ] || die "K8sUpgrade needs the previous Kubernetes set: no $prev (make node-artifacts-prev)"
  # shellcheck disable=SC1090
  source "$prev"
  # The component as YAML flow (plane: serve/component.yaml) or JSON (real: the run's KKCluster, via hosts.py).
  grep -qE "version\"?: *\"?${PREV_KUBE_VERSION//./\\.}[\",}]" <<<"$KUBEKEY_COMPONENT" ||
    die "K8sUpgrade: the kept run's component has no $PREV_KUBE_VERSION binaries: keep it with REAL_PREV=1 (README.md)"
  curl -fsS -o /dev/null --max-time 10 "$NODE_MIRROR_URL/kubernetes-release/release/$PREV_KUBE_VERSION/bin/linux/amd64/kubeadm.sha256" ||
    die "K8sUpgrade: the kept run's mirror does not serve $PREV_KUBE_VERSION: keep it with REAL_PREV=1 (README.md)"
  export KUBERNETES_VERSION_UPGRADE_FROM=$PREV_KUBE_VERSION KUBERNETES_VERSION_UPGRADE_TO=$KUBE_VERSION
  export ETCD_VERSION_UPGRADE_TO=$ETCD_IMAGE_TAG COREDNS_VERSION_UPGRADE_TO=$COREDNS_VERSION
  export UPGRADE_FROM_ETCD_IMAGE_TAG=$PREV_ETCD_IMAGE_TAG UPGRADE_FROM_DNS_IMAGE_TAG=$PREV_DNS_IMAGE_TAG
  lb_up
}

# The control-plane load balancer (test/lib/tcp-lb.sh, as real.sh's day-2 run starts it) on the fleet's bridge,
# port 6443, in front of LB_BACKENDS (hosts.py); its log $OUT/lb.log, its pid $OUT/lb.pid; stopped when the glue
# exits (registered first: a balancer that does not come up in time is stopped too).
lb_up() {
  on_exit "tcp_lb_down $(printf %q "$OUT")"
  # shellcheck disable=SC2086 # LB_BACKENDS: words
  tcp_lb_up "$OUT" "$BRIDGE_ADDRESS:6443" $LB_BACKENDS ||
    die "K8sUpgrade: no control-plane load balancer on $BRIDGE_ADDRESS:6443 (above)"
  export CONTROL_PLANE_LB=$BRIDGE_ADDRESS
  log "control-plane load balancer $BRIDGE_ADDRESS:6443 -> $LB_BACKENDS (pid $TCP_LB_PID, log $OUT/lb.log)"
}

# KCPRemediationSpec holds each control plane's bootstrap until it signals through a ConfigMap of the bootstrap
# cluster (the ctr-kcp-remediation flavor's pre-kubeadm command reads and acknowledges it), at the address the
# spec reads from that cluster's kube-public/cluster-info, as kubeadm publishes it. A kubeadm-made bootstrap
# cluster (real:NAME) has it, and its endpoint is on the fleet's bridge already. The local plane (plane:NAME) has
# neither: its kube-apiserver listens on 127.0.0.1, which the hosts cannot reach. So the plane gets a TCP relay on
# the fleet's bridge in front of it (test/lib/tcp-lb.sh; its log $OUT/mgmt-relay/lb.log) and a cluster-info
# naming that relay; both are removed when the glue exits.
kcp_remediation_env() {
  local server port ca
  if kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" get -n kube-public configmap cluster-info >/dev/null 2>&1; then
    log "KCPRemediation: the bootstrap cluster publishes kube-public/cluster-info (the hold's address) already"
    return 0
  fi
  server=$(kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  port=${server##*:}
  [[ $server == https://127.0.0.1:* && -n $ca ]] ||
    die "KCPRemediation: the bootstrap cluster has no kube-public/cluster-info and is not the local plane (server $server): publish one the hosts can reach"
  on_exit "tcp_lb_down $(printf %q "$OUT/mgmt-relay")"
  tcp_lb_up "$OUT/mgmt-relay" "$BRIDGE_ADDRESS:$port" "127.0.0.1:$port" ||
    die "KCPRemediation: no relay to the plane's API server on $BRIDGE_ADDRESS:$port (above)"
  on_exit "kubectl --kubeconfig $(printf %q "$CAPI_E2E_KUBECONFIG") delete -n kube-public configmap cluster-info --ignore-not-found >/dev/null 2>&1"
  # kubeadm's layout: one cluster named "" (the spec reads Clusters[""]).
  kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" create -n kube-public configmap cluster-info --from-literal=kubeconfig="apiVersion: v1
kind: Config
clusters:
- name: \"\"
  cluster:
    server: https://$BRIDGE_ADDRESS:$port
    certificate-authority-data: $ca
" >/dev/null
  log "KCPRemediation: the plane's API server relayed on $BRIDGE_ADDRESS:$port (pid $TCP_LB_PID), kube-public/cluster-info names it"
}

# real:NAME: a kept run of test/vm/real.sh (its work dir, fleet state, serve.env, registry credentials, rendered
# cluster). The spec clusters get the fleet's VMs that are in none of that run's clusters, the same mirror component,
# registry and node artifacts, and the "tcg" flavors: templates/cluster-template.yaml through test/vm/tcg-knobs.py,
# real.sh's own knobs, with the values left as template variables.
from_real() {
  local name=$1 work=${REAL_WORK:-$ROOT/target/real/$1} state=/tmp/capkk-sandbox/$1/state.json f
  for f in "$state" "$work/serve/serve.env" "$work/serve/registry.cred" "$work/workload.kubeconfig" "$work/cluster.yaml"; do
    [ -s "$f" ] || die "no $f: keep a run first (see test/capi-e2e/README.md: HOSTS=$HOSTS REAL_NAME=$name REAL_KEEP=1 REAL_TO=clusterctl_init REAL_EXTRA_VMS=$NEED_HOSTS make e2e-clusterctl)"
  done
  spec_env "$work" "$state" "$work/cluster.yaml"
  export CAPI_E2E_KUBECONFIG=$work/workload.kubeconfig CAPI_E2E_FLAVOR=$BASE_FLAVOR
  export CAPI_E2E_SELF_HOSTED_INIT_WAIT=${CAPI_E2E_SELF_HOSTED_INIT_WAIT-30m}
  # The clusterctl configuration of `make e2e-clusterctl` (the same registry, so SelfHostedSpec's clusterctl init
  # pulls what the management cluster's did), written afresh into OUT, plus the tcg or ctr flavors in our
  # repository.
  node_repository
  [ "$KCP_REMEDIATION" = 0 ] || kcp_remediation_env "$work"
  log "real:$name: bootstrap cluster = the run's cluster ($CAPI_E2E_KUBECONFIG), hosts ($HOSTS) $KUBEKEY_INSTANCES, registry $NODE_REGISTRY, $BASE_FLAVOR flavors"
}

# The flavors of the kept run's hosts in our repository under OUT, with the values left as template variables:
# tcg on VMs, ctr on node containers. CAPI's providers from TCG copies (tcg-providers.py) on VMs only.
node_repository() {
  "$ROOT/test/clusterctl/config.sh" "$NODE_REGISTRY" "$OUT/clusterctl" "$VERSION" >/dev/null
  CCONF=$OUT/clusterctl/clusterctl.yaml
  if [ "$HOSTS" = containers ]; then
    ctr_flavors "$OUT/clusterctl/infrastructure-kubekey/$VERSION"
  else
    python3 "$HERE/tcg-providers.py" "$CCONF" "$OUT/clusterctl/capi-tcg"
    tcg_flavors "$OUT/clusterctl/infrastructure-kubekey/$VERSION"
  fi
}

# The ctr flavors (node containers) in the repository DIR, with the values left as template variables: real.sh's
# settings for node containers (tcg-knobs.py: the registry, runtime versions, --container-hosts for kube-proxy's
# conntrack and the kubelet's eviction thresholds, --cgroup-v1 on this machine's hybrid cgroups, kubeadm's addon
# phase retried after init) on the flannel flavor (the pod network by ClusterResourceSet: routes follow the Nodes
# wherever a rollout puts them, which the tcg flavors' static routes do not):
#   ctr                  templates/cluster-template-flannel.yaml with those settings
#   ctr-upgrades         ctr behind the control-plane load balancer, etcd and CoreDNS at the tags the registry
#                        carries for the older version, registry.k8s.io mirrored by the registry
#   ctr-ha               templates/cluster-template-ha.yaml (keepalived VIP + haproxy served by the provider) with
#                        the flannel flavor's ClusterResourceSet (--cni-from) and the same settings
#   ctr-kcp-md-taints, ctr-md-remediation   ctr + the spec's taints / MachineHealthCheck (flavors.py)
#   ctr-kcp-remediation  ctr-ha + KCPRemediationSpec's hold of the control planes' bootstrap and its
#                        MachineHealthCheck (flavors.py)
ctr_flavors() {
  local dir=$1 flavor src extra knobs=(--container-hosts)
  [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || knobs+=(--cgroup-v1)
  for flavor in ctr ctr-upgrades ctr-ha; do
    src=$ROOT/templates/cluster-template-flannel.yaml extra=()
    # shellcheck disable=SC2016 # the ${...} are template variables
    case $flavor in
      ctr-upgrades) extra=(--control-plane-lb '${CONTROL_PLANE_LB}' --etcd-image-tag '${UPGRADE_FROM_ETCD_IMAGE_TAG}'
        --dns-image-tag '${UPGRADE_FROM_DNS_IMAGE_TAG}' --k8s-io-mirror-secret capi-e2e-k8s-io-mirror) ;;
      ctr-ha) src=$ROOT/templates/cluster-template-ha.yaml extra=(--cni-from "$ROOT/templates/cluster-template-flannel.yaml") ;;
    esac
    # shellcheck disable=SC2016 # the ${...} are the flavor's template variables, for clusterctl to fill
    python3 "$ROOT/test/vm/tcg-knobs.py" "$src" "$dir/cluster-template-$flavor.yaml" "${knobs[@]}" \
      --registry '${NODE_REGISTRY}' --registry-secret capi-e2e-registry \
      --containerd '${CONTAINERD_VERSION}' --runc '${RUNC_VERSION}' --crictl '${CRICTL_VERSION}' \
      --pause '${NODE_REGISTRY}/pause:${PAUSE_VERSION}' --pod-cidr '${POD_CIDR}' --node-mask 27 --no-static-cni \
      --addons-after-init "${extra[@]}"
  done
  for flavor in kcp-md-taints md-remediation; do
    python3 "$HERE/flavors.py" "$dir/cluster-template-ctr.yaml" "$dir/cluster-template-ctr-$flavor.yaml" "$flavor"
  done
  python3 "$HERE/flavors.py" "$dir/cluster-template-ctr-ha.yaml" "$dir/cluster-template-ctr-kcp-remediation.yaml" kcp-remediation
}

# The tcg flavors (VMs), with the values left as template variables:
#   tcg                  real.sh's knobs (tcg-knobs.py) on templates/cluster-template.yaml
#   tcg-single           the same, the control-plane node untainted (SelfHostedSpec on one node)
#   tcg-kcp-md-taints    tcg + the rollout spec's taints (flavors.py)
#   tcg-md-remediation   tcg + the remediation spec's MachineHealthCheck (flavors.py)
#   tcg-upgrades         tcg behind the control-plane load balancer, etcd and CoreDNS at the tags the registry
#                        carries for the older version, registry.k8s.io mirrored by the registry (tcg-knobs.py)
tcg_flavors() { # tcg_flavors DIR: the tcg flavors into the repository DIR
  local dir=$1 extra flavor
  for flavor in tcg tcg-single tcg-upgrades; do
    extra=()
    # shellcheck disable=SC2016 # the ${...} are template variables
    case $flavor in
      tcg-single) extra=(--untainted-control-plane) ;;
      tcg-upgrades) extra=(--control-plane-lb '${CONTROL_PLANE_LB}' --etcd-image-tag '${UPGRADE_FROM_ETCD_IMAGE_TAG}'
        --dns-image-tag '${UPGRADE_FROM_DNS_IMAGE_TAG}' --k8s-io-mirror-secret capi-e2e-k8s-io-mirror) ;;
    esac
    # shellcheck disable=SC2016 # the ${...} are the flavor's template variables, for clusterctl to fill
    python3 "$ROOT/test/vm/tcg-knobs.py" "$ROOT/templates/cluster-template.yaml" "$dir/cluster-template-$flavor.yaml" \
      --registry '${NODE_REGISTRY}' --registry-secret capi-e2e-registry \
      --containerd '${CONTAINERD_VERSION}' --runc '${RUNC_VERSION}' --crictl '${CRICTL_VERSION}' \
      --pause '${NODE_REGISTRY}/pause:${PAUSE_VERSION}' --pod-cidr '${CP_POD_CIDR}' --worker-pod-cidr '${WORKER_POD_CIDR}' \
      --cp-routes '${WORKER_POD_CIDR}=${WORKER_ADDRESS}' --worker-routes '${CP_POD_CIDR}=${CP_ADDRESS}' \
      --addons-after-init "${extra[@]}"
  done
  for flavor in kcp-md-taints md-remediation; do
    python3 "$HERE/flavors.py" "$dir/cluster-template-tcg.yaml" "$dir/cluster-template-tcg-$flavor.yaml" "$flavor"
  done
}

# plane:NAME: a kept run of test/vm/real.sh stopped at serve_up: the local plane is the bootstrap cluster (CAPI's
# controllers and ours run there as processes, ours watching every namespace), the fleet's first VMs the hosts.
from_plane() {
  local name=$1 work=${REAL_WORK:-$ROOT/target/real/$1} state=/tmp/capkk-sandbox/$1/state.json f
  for f in "$state" "$work/serve/serve.env" "$work/serve/registry.cred" "$work/serve/component.yaml"; do
    [ -s "$f" ] || die "no $f: keep a run first (see test/capi-e2e/README.md: HOSTS=$HOSTS REAL_NAME=$name REAL_KEEP=1 REAL_TO=serve_up REAL_VMS=2 REAL_EXTRA_VMS=$((NEED_HOSTS > 2 ? NEED_HOSTS - 2 : 0)) MANAGER_ALL_NAMESPACES=1 make e2e-clusterctl)"
  done
  KUBEKEY_COMPONENT=$(<"$work/serve/component.yaml")
  export KUBEKEY_COMPONENT
  spec_env "$work" "$state"
  export CAPI_E2E_KUBECONFIG=${CAPKK_MGMT_DIR:-$CAPKK_CACHE/mgmt}/kubeconfig CAPI_E2E_FLAVOR=$BASE_FLAVOR
  if [ "$HOSTS" = vms ]; then
    # Two TCG cores carry the self-hosted management cluster as one untainted control-plane VM; node
    # containers take CAPI's own shape (a control plane and a worker, the spec's defaults).
    export CAPI_E2E_SELF_HOSTED_FLAVOR=${CAPI_E2E_SELF_HOSTED_FLAVOR-tcg-single}
    export CAPI_E2E_SELF_HOSTED_WORKERS=${CAPI_E2E_SELF_HOSTED_WORKERS-0}
  fi
  # The self-hosted cluster's clusterctl init with a provider wait a one-node TCG cluster meets (the
  # framework's own init waits 5 min per provider; see e2e_suite_test.go); empty: the framework's init.
  export CAPI_E2E_SELF_HOSTED_INIT_WAIT=${CAPI_E2E_SELF_HOSTED_INIT_WAIT-30m}
  node_repository
  plane_for_move
  [ "$KCP_REMEDIATION" = 0 ] || kcp_remediation_env "$work"
  # Only SelfHostedSpec runs our manager as a Pod (and a run kept with REAL_PREV=1 for K8sUpgrade alone may
  # serve a read-only registry).
  [ "$SELF_HOSTED" = 0 ] || push_manager_image
  log "plane:$name: bootstrap cluster = the local plane ($CAPI_E2E_KUBECONFIG), hosts ($HOSTS) $KUBEKEY_INSTANCES, registry $NODE_REGISTRY, $BASE_FLAVOR flavors; SelfHosted: flavor '${CAPI_E2E_SELF_HOSTED_FLAVOR-$BASE_FLAVOR}', ${CAPI_E2E_SELF_HOSTED_WORKERS-1} worker(s)"
}

# SelfHostedSpec's init pulls our manager from the bridge registry, as the components' image override says; in the
# real:NAME mode make e2e-clusterctl's init pushed it already. The image is `make image`'s (IMG, PODMAN as in make).
push_manager_image() {
  local podman ref=$NODE_REGISTRY/capkk-manager:$VERSION img=${IMG:-ghcr.io/capkk-rs/capkk-manager:dev}
  read -ra podman <<<"${PODMAN:-podman}"
  "${podman[@]}" image exists "$img" || die "no image $img: make image (IMG, PODMAN as for make)"
  "${podman[@]}" tag "$img" "$ref"
  "${podman[@]}" push -q --tls-verify=false --creds "$REGISTRY_USER:$REGISTRY_PASSWORD" "$ref" ||
    die "pushing $ref to the bridge registry failed"
  "${podman[@]}" rmi "$ref" >/dev/null 2>&1 || true
  log "pushed $img to the bridge registry as $ref"
}

plane_inventory_remove() {
  local p
  for p in capi-system/cluster-api capi-kubeadm-bootstrap-system/bootstrap-kubeadm \
    capi-kubeadm-control-plane-system/control-plane-kubeadm capkk-system/infrastructure-kubekey; do
    kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" delete --ignore-not-found -n "${p%/*}" \
      "provider.clusterctl.cluster.x-k8s.io/${p#*/}" >/dev/null 2>&1 || true
  done
  # The namespaces plane_for_move made for CAPI's inventory (nothing else lives there on the plane, whose CAPI
  # controllers are processes); capkk-system stays: the plane's managers keep their Leases there.
  kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" delete --ignore-not-found --wait=false namespace capi-system \
    capi-kubeadm-bootstrap-system capi-kubeadm-control-plane-system >/dev/null 2>&1 || true
}

# What `clusterctl init` would have left on the local plane, whose providers run as processes: the label by which
# clusterctl move finds the CRDs to move, and the provider inventory (clusterctl move checks that its target runs
# every provider of the source, at the same version or later: the move back of SelfHostedSpec needs it here).
plane_for_move() {
  local crd capi_src
  # Undone when the run ends: a provider inventory left on the shared plane would make every later
  # `clusterctl move` from it (mgmt_clusterctl_move in make test) require its target to run these providers.
  on_exit plane_inventory_remove
  for crd in $(kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" get crd -o name | grep -E '\.cluster\.x-k8s\.io$' | grep -v '\.clusterctl\.cluster\.x-k8s\.io$'); do
    kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" label --overwrite "$crd" clusterctl.cluster.x-k8s.io= >/dev/null
  done
  # shellcheck disable=SC1091
  source "$CAPKK_CACHE/clusterctl/current.env"
  capi_src=$(cd "$HERE" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  [ -f "$capi_src/cmd/clusterctl/config/manifest/clusterctl-api.yaml" ] || die "no clusterctl-api.yaml in $capi_src"
  kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" apply --server-side --force-conflicts \
    -f "$capi_src/cmd/clusterctl/config/manifest/clusterctl-api.yaml" >/dev/null
  kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" wait --for condition=established --timeout=60s \
    crd/providers.clusterctl.cluster.x-k8s.io >/dev/null
  # shellcheck disable=SC2153 # CAPI_VERSION: from current.env
  python3 - "$CAPI_VERSION" "$VERSION" <<'PY' | kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" apply --server-side --force-conflicts -f - >/dev/null
import json, sys
capi, ours = sys.argv[1], sys.argv[2]
rows = [("cluster-api", "capi-system", "cluster-api", "CoreProvider", capi),
        ("bootstrap-kubeadm", "capi-kubeadm-bootstrap-system", "kubeadm", "BootstrapProvider", capi),
        ("control-plane-kubeadm", "capi-kubeadm-control-plane-system", "kubeadm", "ControlPlaneProvider", capi),
        ("infrastructure-kubekey", "capkk-system", "kubekey", "InfrastructureProvider", ours)]
items = []
for name, ns, provider, kind, version in rows:
    items.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    items.append({"apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "kind": "Provider",
                  "metadata": {"name": name, "namespace": ns, "labels": {
                      "clusterctl.cluster.x-k8s.io": "", "clusterctl.cluster.x-k8s.io/core": "inventory",
                      "cluster.x-k8s.io/provider": name}},
                  "providerName": provider, "type": kind, "version": version})
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}

run() {
  local bin from=${CAPI_E2E_FROM:-} name rc=0 t0
  [ -n "$from" ] || die "set CAPI_E2E_FROM=sandbox:NAME, real:NAME or plane:NAME (see test/capi-e2e/README.md)"
  name=${from#*:}
  # The focused specs and the hosts they need first: a focus that selects nothing fails before minutes of build.
  case $from in
    sandbox:?*) FOCUS=${CAPI_E2E_FOCUS-QuickStart} ;;
    real:?* | plane:?*) FOCUS=${CAPI_E2E_FOCUS-QuickStart|SelfHosted} ;;
    *) die "CAPI_E2E_FROM=$from: expected sandbox:NAME, real:NAME or plane:NAME" ;;
  esac
  plan_specs
  HOSTS=${HOSTS:-containers}
  case $HOSTS in
    containers) BASE_FLAVOR=ctr ;;
    vms) BASE_FLAVOR=tcg ;;
    *) die "HOSTS=$HOSTS: containers or vms (what the kept run's hosts are)" ;;
  esac
  [[ $from != sandbox:* ]] || HOSTS=sandbox
  containers_only_check
  OUT=${CAPI_E2E_OUT:-$ROOT/target/capi-e2e/$name}
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  bin=$(build)
  mgmt_path
  case $from in
    sandbox:?*) from_sandbox "$name" ;;
    real:?*) from_real "$name" ;;
    plane:?*) from_plane "$name" ;;
  esac
  [ "$ROLLOUT" = 0 ] || taint_gate_check
  local artifacts
  artifacts=$OUT/artifacts-$(date +%Y%m%d-%H%M%S)
  log "focus '$FOCUS', artifacts $artifacts (ginkgo-log.txt, clusters/*/, clusterctl logs)"
  t0=$(date +%s)
  # -ginkgo.poll-progress-after: a spec waiting minutes on a TCG node reports what it waits on every minute.
  # -ginkgo.grace-period: after Ctrl-C the spec's cleanup deletes its cluster (host resets take minutes on VMs).
  # shellcheck disable=SC2086 # CAPI_E2E_ARGS: words
  (cd "$HERE" && "$bin" -test.v -ginkgo.v -ginkgo.no-color -ginkgo.focus="$FOCUS" -ginkgo.timeout=10h \
    -ginkgo.poll-progress-after=60s -ginkgo.poll-progress-interval=60s -ginkgo.grace-period=45m \
    -e2e.config="$HERE/config/capkk.yaml" -e2e.artifacts-folder="$artifacts" \
    -e2e.clusterctl-config="$CCONF" -e2e.use-existing-cluster=true ${CAPI_E2E_ARGS:-}) || rc=$?
  log "suite exit $rc after $(($(date +%s) - t0))s; artifacts $artifacts"
  return "$rc"
}

# flavors OUT: our provider's repository under OUT with every flavor the specs take (the tcg, ctr and sandbox
# ones), for `clusterctl generate cluster --config OUT/clusterctl.yaml --flavor F --list-variables`.
flavors() {
  [ -n "${1:-}" ] || die "usage: $0 flavors OUT"
  mkdir -p "$1"
  "$ROOT/test/release/release-manifests.sh" --local-config "$1" "$VERSION" "ghcr.io/capkk-rs/capkk-manager:$VERSION" >/dev/null
  tcg_flavors "$1/infrastructure-kubekey/$VERSION"
  ctr_flavors "$1/infrastructure-kubekey/$VERSION"
  sandbox_flavors "$1/infrastructure-kubekey/$VERSION"
  (cd "$1/infrastructure-kubekey/$VERSION" && ls cluster-template-*.yaml) >&2
  echo "$1/clusterctl.yaml"
}

case ${1:-} in
  build) build >/dev/null ;;
  run) run ;;
  flavors) flavors "${2:-}" ;;
  *) die "usage: $0 build|run|flavors OUT" ;;
esac
