#!/usr/bin/env python3
"""The spec clusters' hosts from a kept test/vm/real.sh run, as shell assignments for capi-e2e.sh to eval.

    hosts.py STATE_JSON [CLUSTER_YAML]

STATE_JSON is the fleet's state (/tmp/capkk-sandbox/NAME/state.json). With CLUSTER_YAML (the run's own cluster),
the hosts are the first two VMs in none of its KKCluster's instances, and KUBEKEY_COMPONENT is that KKCluster's
spec.component; without it (a run stopped before its own cluster), VMs 1 and 2. The first is the control plane.
"""

import json
import sys

import yaml

if len(sys.argv) not in (2, 3):
    sys.exit(__doc__)
state = json.load(open(sys.argv[1]))
vms, component = state["vms"], None
if len(sys.argv) == 3:
    used = set()
    for d in yaml.safe_load_all(open(sys.argv[2])):
        if d and d.get("kind") == "KKCluster":
            used |= {i["address"] for i in d["spec"]["nodes"]["instances"]}
            component = d["spec"].get("component")
    vms = [v for v in vms if v["address"] not in used]
    if len(vms) < 2:
        sys.exit(f"{len(vms)} VM(s) of the fleet are in no cluster; the specs need 2 (REAL_EXTRA_VMS=2)")
elif len(vms) < 2:
    sys.exit(f"the fleet has {len(vms)} VM(s); the specs need 2 (REAL_VMS=2)")
cp, w = vms[0], vms[1]


def inst(v, role):
    return {"name": v["name"], "address": v["address"], "roles": [role], "hostKeys": [v["host_key_fingerprint"]]}


print("KUBEKEY_INSTANCES=" + json.dumps(json.dumps([inst(cp, "control-plane"), inst(w, "worker")])))
if component is not None:
    print("KUBEKEY_COMPONENT=" + json.dumps(json.dumps(component)))
print("CP_ADDRESS=" + cp["address"])
print("WORKER_ADDRESS=" + w["address"])
print("CAPI_E2E_SSH_KEY_FILE=" + state["private_key"])
