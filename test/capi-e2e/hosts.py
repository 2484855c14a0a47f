#!/usr/bin/env python3
"""The spec clusters' hosts from a kept test/vm/real.sh run, as shell assignments for capi-e2e.sh to eval.

    hosts.py STATE_JSON [CLUSTER_YAML] [--hosts N]

STATE_JSON is the fleet's state (/tmp/capkk-sandbox/NAME/state.json). With CLUSTER_YAML (the run's own cluster),
the candidates are the hosts in none of its KKCluster's instances, and KUBEKEY_COMPONENT is that KKCluster's
spec.component; without it (a run stopped before its own cluster), every host of the fleet. N (default 2) hosts
are taken, in fleet order A, B, C, ...

On VMs (the fleet's source "vms": the tcg flavors' static per-node routes name the first control plane's and
the first worker's addresses, so who lands where is fixed) N is 2 or 3:

- 2 hosts: [A control-plane, B worker];
- 3 hosts: [B worker, A control-plane+worker, C control-plane+worker]. A host is claimed in inventory order, so
  the first worker Machine takes B and the first control-plane Machine A, as with 2; a surge worker (a
  MachineDeployment's rollout) takes C, a surge control plane (KubeadmControlPlane's rollout) takes C too and the
  worker rolled after it takes A, which the old control plane left. A and C are behind the control-plane load
  balancer when there is one (LB_BACKENDS).

On node containers (source "containers": the ctr flavors' pod network is flannel, which routes by the Nodes'
pod subnets wherever they are) any N >= 2: every host may be a control plane or a worker, so any spec's Machines
(3 control planes of the ha flavor, a rollout's surge of either kind) take the next free host, and every host is
behind the control-plane load balancer.

CP_ADDRESS and WORKER_ADDRESS (A and B) are the tcg flavor's per-node routes.
"""

import argparse
import json
import sys

import yaml

p = argparse.ArgumentParser(usage=__doc__)
p.add_argument("state")
p.add_argument("cluster", nargs="?")
p.add_argument("--hosts", type=int, default=2)
a = p.parse_args()

state = json.load(open(a.state))
# Manifests written before node containers carry no source: VMs.
source = state.get("source", "vms")
if a.hosts < 2 or (source == "vms" and a.hosts > 3):
    sys.exit(f"--hosts {a.hosts}: 2 or 3 on VMs, 2 or more on node containers (the fleet's source: {source})")
vms, component = state["vms"], None
if a.cluster:
    used = set()
    for d in yaml.safe_load_all(open(a.cluster)):
        if d and d.get("kind") == "KKCluster":
            used |= {i["address"] for i in d["spec"]["nodes"]["instances"]}
            component = d["spec"].get("component")
    vms = [v for v in vms if v["address"] not in used]
    if len(vms) < a.hosts:
        sys.exit(f"{len(vms)} host(s) of the fleet are in no cluster, {a.hosts} needed (REAL_EXTRA_VMS={a.hosts})")
elif len(vms) < a.hosts:
    sys.exit(f"the fleet has {len(vms)} host(s), {a.hosts} needed (REAL_VMS + REAL_EXTRA_VMS = {a.hosts})")


def inst(v, *roles):
    return {"name": v["name"], "address": v["address"], "roles": list(roles), "hostKeys": [v["host_key_fingerprint"]]}


cp, w = vms[0], vms[1]
if source == "containers":
    chosen = vms[: a.hosts]
    instances, backends = [inst(v, "control-plane", "worker") for v in chosen], chosen
elif a.hosts == 2:
    instances, backends = [inst(cp, "control-plane"), inst(w, "worker")], [cp]
else:
    spare = vms[2]
    instances = [inst(w, "worker"), inst(cp, "control-plane", "worker"), inst(spare, "control-plane", "worker")]
    backends = [cp, spare]

print("HOSTS_SOURCE=" + source)
print("KUBEKEY_INSTANCES=" + json.dumps(json.dumps(instances)))
if component is not None:
    print("KUBEKEY_COMPONENT=" + json.dumps(json.dumps(component)))
print("CP_ADDRESS=" + cp["address"])
print("WORKER_ADDRESS=" + w["address"])
print("LB_BACKENDS=" + json.dumps(" ".join(f"{v['address']}:6443" for v in backends)))
print("BRIDGE_ADDRESS=" + state["bridge_address"])
print("INNER_CIDR=" + state["inner_cidr"])
print("CAPI_E2E_SSH_KEY_FILE=" + state["private_key"])
