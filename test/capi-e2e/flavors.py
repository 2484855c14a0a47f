#!/usr/bin/env python3
"""What CAPI's specs require of their flavors, added to one of ours (as CAPD's flavors patch its base cluster).

    flavors.py IN OUT FLAVOR

IN is a cluster template with its variables left in (the tcg flavor of test/vm/tcg-knobs.py on the VM modes,
templates/cluster-template.yaml on sandbox hosts); OUT gets IN plus, by FLAVOR:

- kcp-md-taints (KCPAndMachineDeploymentRolloutSpec): the two Machine taints the spec finds on every Machine and
  Node before it adds and removes its own, on the KubeadmControlPlane's and the MachineDeployment's Machines;
- md-remediation (MachineDeploymentRemediationSpec): the label `e2e.remediation.label` on the MachineDeployment's
  Machines and a MachineHealthCheck selecting them that takes the Node condition `e2e.remediation.condition`
  False for 10 s as unhealthy, with CAPI's own remediation (the Machine is deleted and replaced: no
  remediation template). The spec sets that condition on a Node and waits for the replacement.
- kcp-remediation (KCPRemediationSpec; IN must serve a control plane of 3, e.g. the ha flavor): every
  control-plane host's bootstrap held before kubeadm by a script (a file of the bootstrap data, run as a
  pre-kubeadm command) that polls the ConfigMap `mhc-test` in the spec's namespace of the bootstrap cluster
  (${SERVER}, with the ServiceAccount token ${TOKEN} the spec makes) until its `signal` is `pass`, acknowledges
  it (`ack-pass`) and lets kubeadm run; and a MachineHealthCheck on the control-plane Machines the spec labels
  `mhc-test: fail`, taking a Machine without a Node after 30 s, or with `e2e.remediation.condition` False for
  10 s, as unhealthy (KubeadmControlPlane remediates it).

The keys, values, names and condition are the spec's (sigs.k8s.io/cluster-api/test/e2e: kcp_md_rollout.go,
md_remediations.go, kcp_remediations.go); everything else stays as IN has it.
"""

import sys

import yaml

# The spec asserts exactly these (key, value, effect, propagation), before it changes them.
TAINTS = [
    {
        "key": "pre-existing-on-initialization-taint",
        "value": "on-initialization-value",
        "effect": "PreferNoSchedule",
        "propagation": "OnInitialization",
    },
    {"key": "pre-existing-always-taint", "value": "always-value", "effect": "PreferNoSchedule", "propagation": "Always"},
]
REMEDIATION_LABEL = "e2e.remediation.label"


def mhc():
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "${CLUSTER_NAME}-mhc-0", "namespace": "${NAMESPACE}"},
        "spec": {
            "clusterName": "${CLUSTER_NAME}",
            "selector": {"matchLabels": {REMEDIATION_LABEL: ""}},
            "checks": {
                # CAPI's default is 10 min from the Machine's infrastructure being ready to its Node; a replacement
                # on a TCG VM (host reset, packages, containerd, kubeadm join) can take longer under load, and a
                # second, spurious remediation would fail the spec's count.
                "nodeStartupTimeoutSeconds": 1800,
                "unhealthyNodeConditions": [{"type": "e2e.remediation.condition", "status": "False", "timeoutSeconds": 10}],
            },
            "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": "100%"}},
        },
    }


def kcp_mhc():
    return {
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "MachineHealthCheck",
        "metadata": {"name": "${CLUSTER_NAME}-mhc-cp", "namespace": "${NAMESPACE}"},
        "spec": {
            "clusterName": "${CLUSTER_NAME}",
            "selector": {"matchLabels": {"cluster.x-k8s.io/control-plane": "", "mhc-test": "fail"}},
            "checks": {
                "nodeStartupTimeoutSeconds": 30,
                "unhealthyNodeConditions": [{"type": "e2e.remediation.condition", "status": "False", "timeoutSeconds": 10}],
            },
            "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": "100%"}},
        },
    }


HOLD_PATH = "/etc/capkk-test/kcp-remediation-hold.sh"
# No shell variables: clusterctl substitutes every $NAME of a template, so the spec's three (SERVER, TOKEN,
# NAMESPACE) are the only ones. TLS is not verified: the spec's address is the bootstrap cluster's as published
# in its cluster-info, whose serving certificate need not name it (the local plane's is relayed onto the fleet's
# bridge); the token reads and patches one ConfigMap of the spec's throwaway namespace. The token stays in this
# file (the bootstrap data), out of the command line the provider runs and reports.
HOLD = """#!/bin/sh
# KCPRemediationSpec's hold: kubeadm runs on this host once the spec signals 'pass' (ConfigMap mhc-test).
while :; do
  if curl -fsSk --max-time 10 -H 'Authorization: Bearer ${TOKEN}' '${SERVER}/api/v1/namespaces/${NAMESPACE}/configmaps/mhc-test' | grep -q '"signal": *"pass"'; then
    curl -fsSk --max-time 10 -o /dev/null -X PATCH -H 'Authorization: Bearer ${TOKEN}' -H 'Content-Type: application/merge-patch+json' --data '{"data":{"signal":"ack-pass"}}' '${SERVER}/api/v1/namespaces/${NAMESPACE}/configmaps/mhc-test' && exit 0
  fi
  sleep 5
done
"""


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, dst, flavor = sys.argv[1:]
    docs = [d for d in yaml.safe_load_all(open(src)) if d]
    kinds = {d.get("kind") for d in docs}
    if not {"KubeadmControlPlane", "MachineDeployment"} <= kinds:
        sys.exit(f"flavors.py: {src} lacks a KubeadmControlPlane or a MachineDeployment")
    if flavor == "kcp-md-taints":
        for d in docs:
            if d["kind"] == "KubeadmControlPlane":
                d["spec"]["machineTemplate"].setdefault("spec", {})["taints"] = TAINTS
            elif d["kind"] == "MachineDeployment":
                d["spec"]["template"]["spec"]["taints"] = TAINTS
    elif flavor == "md-remediation":
        for d in docs:
            if d["kind"] == "MachineDeployment":
                d["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})[REMEDIATION_LABEL] = ""
        docs.append(mhc())
    elif flavor == "kcp-remediation":
        for d in docs:
            if d["kind"] == "KubeadmControlPlane":
                k = d["spec"]["kubeadmConfigSpec"]
                k["files"] = k.get("files", []) + [{"path": HOLD_PATH, "permissions": "0700", "content": HOLD}]
                k["preKubeadmCommands"] = k.get("preKubeadmCommands", []) + [f"sh {HOLD_PATH}"]
        docs.append(kcp_mhc())
    else:
        sys.exit(f"flavors.py: unknown flavor {flavor!r} (kcp-md-taints, md-remediation, kcp-remediation)")
    with open(dst, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)


main()
