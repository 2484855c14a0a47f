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

The keys, values and condition are the spec's (sigs.k8s.io/cluster-api/test/e2e: kcp_md_rollout.go,
md_remediations.go); everything else stays as IN has it.
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
    else:
        sys.exit(f"flavors.py: unknown flavor {flavor!r} (kcp-md-taints, md-remediation)")
    with open(dst, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)


main()
