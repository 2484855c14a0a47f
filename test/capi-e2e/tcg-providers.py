#!/usr/bin/env python3
"""CAPI's three providers, as a clusterctl repository for clusters whose nodes are TCG VMs.

    tcg-providers.py CLUSTERCTL_YAML OUT_DIR

Copies the local repositories of cluster-api, kubeadm bootstrap and kubeadm control plane that CLUSTERCTL_YAML
names into OUT_DIR/<label>/<version>/, with each controller Deployment changed as test/vm/real.sh changes them
after `make e2e-clusterctl`'s init (TCG_PROBES): no liveness probe, a 10 s readiness timeout, leader-election
leases of 60/40/10 s. Under TCG a controller's first list of every CAPI kind takes longer than the upstream probes
and 15 s leases allow, and the kubelet kills it over and over; real.sh patches the Deployments after init, but
SelfHostedSpec's init (the framework's) waits for them at once, so the change is made in the repository.
CLUSTERCTL_YAML's provider URLs are then pointed at the copies (our provider and cert-manager are unchanged).
"""

import os
import shutil
import sys
from urllib.parse import urlparse

import yaml

CAPI = {"cluster-api", "bootstrap-kubeadm", "control-plane-kubeadm"}
LEASES = ["--leader-elect-lease-duration=60s", "--leader-elect-renew-deadline=40s", "--leader-elect-retry-period=10s"]


def patch_components(text):
    docs = list(yaml.safe_load_all(text))
    deployments = 0
    for d in docs:
        if not d or d.get("kind") != "Deployment":
            continue
        c = d["spec"]["template"]["spec"]["containers"][0]
        c.pop("livenessProbe", None)
        if "readinessProbe" in c:
            c["readinessProbe"]["timeoutSeconds"] = 10
        c["args"] = [x for x in c.get("args", []) if not x.startswith("--leader-elect-")] + LEASES
        deployments += 1
    if deployments == 0:
        sys.exit("tcg-providers.py: a components file without a Deployment")
    return yaml.safe_dump_all(docs, sort_keys=False)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    conf_path, out = sys.argv[1], os.path.abspath(sys.argv[2])
    conf = yaml.safe_load(open(conf_path))
    done = set()
    for p in conf["providers"]:
        path = urlparse(p["url"]).path
        version_dir = os.path.dirname(path)
        label = os.path.basename(os.path.dirname(version_dir))
        if label not in CAPI:
            continue
        dst_dir = os.path.join(out, label, os.path.basename(version_dir))
        shutil.rmtree(dst_dir, ignore_errors=True)
        shutil.copytree(version_dir, dst_dir)
        dst = os.path.join(dst_dir, os.path.basename(path))
        with open(path) as f:
            patched = patch_components(f.read())
        with open(dst, "w") as f:
            f.write(patched)
        p["url"] = "file://" + dst
        done.add(label)
    if done != CAPI:
        sys.exit(f"tcg-providers.py: {conf_path} lacks {sorted(CAPI - done)}")
    with open(conf_path, "w") as f:
        f.write("# Written by test/capi-e2e/tcg-providers.py: CAPI's providers from TCG copies (see that file).\n")
        yaml.safe_dump(conf, f, sort_keys=False)


main()
