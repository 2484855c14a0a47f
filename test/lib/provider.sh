# shellcheck shell=bash
# The provider under test on the local management plane, shared by test/e2e/e2e.sh and test/vm/real.sh.
# Sourced, not executed, after test/lib/harness.sh (check, wait_for, log).
#
# What `clusterctl init` would install, by hand (why not `clusterctl init`: docs/clusterctl.md): the components of
# `clusterctl generate provider` from our local repository (make release-manifests) but the Deployment; the manager
# runs as a local process instead (the binary just built, its log in $WORK/manager.log), authenticated as the
# Deployment's ServiceAccount, so that it has exactly config/rbac's permissions.
#
# Uses the sourcing script's ROOT, WORK, VERSION, NAME, NS (the test namespace), CLUSTER, MANAGER (the manager
# binary) and its http_ok URL (the readiness probe; each test has its own). Sets CCONF (provider_release).

MANAGER_SA_NS=capkk-system
MANAGER_SA=capkk-controller-manager

provider_release() { # the local clusterctl repository ($CCONF its config) and $WORK/components.yaml
  "$ROOT/test/release/release-manifests.sh" --local-config "$WORK/repo" "$VERSION" "ghcr.io/capkk-rs/capkk-manager:$VERSION" >/dev/null
  CCONF=$WORK/repo/clusterctl.yaml
  clusterctl generate provider --infrastructure "kubekey:$VERSION" --config "$CCONF" >"$WORK/components.yaml"
}

# provider_install [ON_TERMINATING...]: CRDs + RBAC, the namespace NS, $WORK/manager.kubeconfig.
# A namespace NS still Terminating from an earlier run is waited out; ON_TERMINATING (a command) runs first when
# the test knows what can hold it up.
provider_install() {
  # Everything of the components but the Deployment: the manager runs as a local process instead.
  python3 - "$WORK/components.yaml" "$WORK/components-no-deployment.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
keep = [d for d in docs if "\nkind: Deployment\n" not in "\n" + d + "\n"]
open(sys.argv[2], "w").write("\n---\n".join(keep) + "\n")
PY
  kubectl apply --server-side --force-conflicts -f "$WORK/components-no-deployment.yaml" >/dev/null
  kubectl wait --for condition=established --timeout=60s crd/kkclusters.infrastructure.cluster.x-k8s.io \
    crd/kkmachines.infrastructure.cluster.x-k8s.io crd/kkinstances.infrastructure.cluster.x-k8s.io >/dev/null
  if [ "$(kubectl get ns "$NS" -o jsonpath='{.status.phase}' 2>/dev/null)" = Terminating ]; then
    [ $# = 0 ] || "$@"
    wait_for "namespace $NS of an earlier run finished terminating" 600 \
      bash -c "[ \"\$(kubectl get ns '$NS' -o jsonpath='{.status.phase}' 2>/dev/null)\" != Terminating ]"
  fi
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  manager_lease_grant
  manager_kubeconfig
}

# manager_lease_grant: the shipped leader-election Role lets the ServiceAccount write the Lease
# capkk-manager-leader only (by resourceNames; docs/scaling.md). The local manager elects on a Lease of this run
# (capkk-$NAME, apart from the Deployment's), so a Role of its own grants that name, as an operator grants a
# shard's Lease.
manager_lease_grant() {
  kubectl apply -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: capkk-$NAME-leader-election, namespace: $MANAGER_SA_NS}
rules:
  - {apiGroups: [coordination.k8s.io], resources: [leases], resourceNames: [capkk-$NAME], verbs: [get, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: capkk-$NAME-leader-election, namespace: $MANAGER_SA_NS}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: capkk-$NAME-leader-election}
subjects: [{kind: ServiceAccount, name: $MANAGER_SA, namespace: $MANAGER_SA_NS}]
EOF
}

manager_kubeconfig() { # a kubeconfig for the ServiceAccount the Deployment would run as (config/rbac's permissions)
  local server ca token
  server=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  token=$(kubectl -n "$MANAGER_SA_NS" create token "$MANAGER_SA" --duration=24h)
  umask 077
  cat >"$WORK/manager.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: mgmt, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: $MANAGER_SA, user: {token: "$token"}}]
contexts: [{name: manager, context: {cluster: mgmt, user: $MANAGER_SA, namespace: $MANAGER_SA_NS}}]
current-context: manager
EOF
  umask 022
}

# start_manager READY_TIMEOUT [ARG...]: the manager as a local process (ARGs added to its command line) with leader
# election, as in the Deployment, until its /readyz answers. It watches NS only, unless MANAGER_ALL_NAMESPACES=1
# (as the Deployment does: CAPI's test framework creates a namespace of its own per spec).
start_manager() {
  local timeout=$1 port ns=(--namespace "$NS")
  shift
  [ "${MANAGER_ALL_NAMESPACES:-0}" != 1 ] || ns=()
  stop_manager
  port=$(free_port_pair)
  KUBECONFIG=$WORK/manager.kubeconfig POD_NAME=$NAME-manager POD_NAMESPACE=$MANAGER_SA_NS RUST_LOG=${RUST_LOG:-info} \
    setsid "$MANAGER" "${ns[@]}" --leader-elect --leader-election-namespace "$MANAGER_SA_NS" \
    --leader-election-id "capkk-$NAME" --health-probe-bind-address "127.0.0.1:$port" \
    --metrics-bind-address "127.0.0.1:$((port + 1))" "$@" --log-format text \
    </dev/null >>"$WORK/manager.log" 2>&1 &
  echo $! >"$WORK/manager.pid"
  wait_for "manager is ready (127.0.0.1:$port/readyz)" "$timeout" http_ok "http://127.0.0.1:$port/readyz"
}

# free_port_pair: a port P with P and P+1 unused, for the manager's health and metrics endpoints. Random, as other
# test runs on the machine start managers of their own; from 10000-19999, below the kernel's ephemeral ports
# (32768 and up: an outgoing connection's local port there once made the metrics bind fail, "Address already in
# use") and below the management planes' ports (22379 and up).
free_port_pair() {
  local port
  for _ in $(seq 100); do
    port=$((10000 + RANDOM % 9999))
    if [ -z "$(ss -Htan "( sport = :$port or sport = :$((port + 1)) )")" ]; then
      echo "$port"
      return 0
    fi
  done
  log "FATAL: no two free adjacent ports in 10000-19999" >&2 # stderr: stdout is the caller's port
  return 1
}

stop_manager() { # the manager this test started (its pid file, and only while that pid is still a manager)
  local pid
  pid=$(cat "$WORK/manager.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = manager ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  fi
  rm -f "$WORK/manager.pid"
}

# One pass over the test's objects in NS, dropping their finalizers: after a failed run the manager that would
# remove them is gone, and the namespace could not go.
drop_finalizers() {
  local o
  for o in $(kubectl get -n "$NS" clusters,machines,machinesets,machinedeployments,kubeadmcontrolplanes,kubeadmconfigs,kkclusters,kkmachines,kkinstances -o name 2>/dev/null); do
    kubectl patch -n "$NS" "$o" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  done
}

# ---------------------------------------------------------------------------------------------------------
# the test cluster, as CAPI and the provider report it

provider_diagnostics() { # provider_diagnostics LINES: the cluster's conditions, our objects, the manager log's last LINES
  log "-- diagnostics"
  clusterctl describe cluster "$CLUSTER" -n "$NS" --show-conditions all 2>&1 | sed 's/^/    /' || true
  kubectl get kkinstances,kkmachines -n "$NS" -o wide 2>&1 | sed 's/^/    /' || true
  log "-- last manager log lines ($WORK/manager.log)"
  tail -n "$1" "$WORK/manager.log" 2>/dev/null | sed 's/^/    /' || true
}

machines_running() { # machines_running SELECTOR COUNT: COUNT Machines, all Running with a nodeRef
  local sel=$1 want=$2 out
  out=$(kubectl get machines -n "$NS" -l "$sel" -o jsonpath='{range .items[*]}{.status.phase}/{.status.nodeRef.name}{"\n"}{end}')
  [ "$(grep -c . <<<"$out")" = "$want" ] && ! grep -qv '^Running/.\+' <<<"$out"
}
# shellcheck disable=SC2034 # the sourcing scripts' selector of the control-plane Machines
CP_SEL="cluster.x-k8s.io/control-plane"

workload_kubeconfig() { # $WORK/workload.kubeconfig: the admin kubeconfig CAPI wrote for the workload cluster
  kubectl get secret -n "$NS" "$CLUSTER-kubeconfig" -o jsonpath='{.data.value}' | base64 -d >"$WORK/workload.kubeconfig"
}
