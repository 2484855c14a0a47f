#!/usr/bin/env python3
"""Add what a real-node test cluster on TCG VMs needs to a `clusterctl generate cluster` rendering.

    tcg-knobs.py IN OUT --registry IP:PORT --registry-secret NAME
                 (--containerd V --runc V --crictl V --pause IMAGE | --no-component-overrides) --pod-cidr CIDR [--worker-pod-cidr CIDR] [--cp-routes CIDR=VIA,...]
                 [--worker-routes CIDR=VIA,...] [--addons-after-init] [--untainted-control-plane]
                 [--control-plane-lb HOST] [--etcd-image-tag TAG] [--dns-image-tag TAG] [--worker-version V]
                 [--k8s-io-mirror-secret NAME] [--container-hosts] [--native-speed] [--cgroup-v1]
                 [--cni-from RENDERING]

Everything here is a setting a user would make in their own cluster YAML; nothing reaches into the product:
- KKCluster spec.registry: the local OCI registry as privateRegistry (plain HTTP, Basic auth from a Secret);
- KKMachineTemplates: the containerd/runc/crictl versions the mirror carries and the pause image (with
  --no-component-overrides none: the rendering's containerManager stays as clusterctl wrote it, and the
  hosts get the component defaults of the Kubernetes version); OS packages with real apt from the host's
  configured sources;
- KubeadmControlPlane: imageRepository = the registry; ECDSA-P256 keys (RSA keygen takes a minute under TCG);
  leader-election leases long enough for a slow apiserver (else kube-controller-manager and kube-scheduler
  crash-loop on renew timeouts and the bootstrap signer never runs); node CIDR mask for the small pod network;
  kubeadm timeouts and static-pod probe thresholds raised (kubeadm patches) because a TCG control plane answers
  in seconds, not milliseconds; a static bridge CNI config per node (enough for Ready and pod traffic on a node);
  with --addons-after-init, kubeadm's addon phase (CoreDNS, kube-proxy) moved out of `kubeadm init` into a
  retried `kubeadm init phase addon all` (see ADDONS below);
- with --untainted-control-plane, the control plane's node registered without kubeadm's NoSchedule taint, as on
  any single-node cluster (a one-node management cluster runs its providers' Pods there);
- workers: the join timeouts, the worker's CNI config, static routes between the nodes' pod subnets;
- with --control-plane-lb, the KKCluster's controlPlaneLoadBalancer (the day-2 run's control plane moves to
  another host: its endpoint is a load balancer, test/vm/tcp-lb.py);
- with --worker-version, the MachineDeployment's Kubernetes version and CAPI's annotation that lets it be one
  minor behind the control plane (MachineSet preflight KubeadmVersionSkew): the 2-VM day-2 run's worker starts
  where a cluster stands after its control plane was upgraded;
- with --etcd-image-tag/--dns-image-tag, the KubeadmControlPlane's etcd and CoreDNS image tags (the day-2 run's
  older Kubernetes would otherwise ask for tags the local registry does not carry);
- with --k8s-io-mirror-secret, kubeadm's imageRepository stays registry.k8s.io and every node's containerd pulls
  registry.k8s.io through the registry instead (a hosts.toml from that Secret, key hosts.toml, with the
  registry's Basic auth header), as an air-gapped user mirrors it: image names stay the upstream ones, which
  CAPI's upgrade spec checks (kube-proxy's image must be registry.k8s.io/kube-proxy:<version>).
- with --no-static-cni, no bridge CNI config: the cluster's own CNI (the flannel flavor's ClusterResourceSet)
  writes it; --node-mask sizes each node's pod subnet (kube-controller-manager's node-cidr-mask-size-ipv4);
- with --container-hosts (node containers on the machine's kernel, test/vm/src/containers.rs), kube-proxy's
  conntrack.maxPerCore 0: only the machine's network namespace may size the conntrack table (needs
  --addons-after-init: the KubeProxyConfiguration goes into the retried addon phase's configuration), and the
  kubelet's eviction thresholds absolute (a kubeadm patch of the KubeletConfiguration): the nodes share the
  machine's disk, whose free share is not theirs;
- with --native-speed (hosts at the machine's own speed: node containers), neither the long leader-election leases
  of kube-controller-manager and kube-scheduler nor the static pods' raised probe thresholds: both are for a TCG
  control plane that answers in seconds, and on native hosts they only delay what follows a lost control plane
  (a new kube-controller-manager leader only after the 120 s lease, so a dead Node NotReady after ~190 s instead
  of ~70 s) and a new control plane's pods turning Ready (20 s probe periods: KCP's next join waits for them);
  kubeadm's defaults apply, as on a user's hosts. The timeouts (upper bounds) stay;
- with --cgroup-v1 (a host on cgroup v1, as node containers on this hybrid-cgroup machine are), the kubelet's
  failCgroupV1: false (a kubeadm patch of the KubeletConfiguration, on every node) and kubeadm's
  SystemVerification preflight check ignored: Kubernetes v1.35+ refuses cgroup v1 unless told both.
- with --cni-from (another flavor's rendering of the same cluster, e.g. the flannel flavor's), its
  ClusterResourceSets and the ConfigMaps they apply join this rendering, and the Cluster gets the labels they
  select: the ha flavor's cluster with flannel's pod network, as a user combines two flavors' YAML.
See ../shared/reference/real-nodes.md for the measurements behind the numbers.
"""

import argparse
import json
import sys

import yaml

p = argparse.ArgumentParser()
p.add_argument("src")
p.add_argument("dst")
p.add_argument("--registry", required=True)
p.add_argument("--registry-secret", required=True)
p.add_argument("--containerd")
p.add_argument("--runc")
p.add_argument("--crictl")
p.add_argument("--pause")
p.add_argument("--no-component-overrides", action="store_true",
               help="set no containerManager versions or sandbox image: the component defaults apply")
p.add_argument("--pod-cidr", required=True, help="the control-plane node's pod subnet")
p.add_argument("--worker-pod-cidr", help="the worker node's pod subnet")
p.add_argument("--cp-routes", default="", help="CIDR=VIA,... on the control-plane node: other nodes' pod subnets")
p.add_argument("--worker-routes", default="", help="CIDR=VIA,... on worker nodes: other nodes' pod subnets")
p.add_argument("--addons-after-init", action="store_true", help="kubeadm's addons in a retried phase after init")
p.add_argument("--untainted-control-plane", action="store_true", help="the control-plane node takes workloads")
p.add_argument("--control-plane-lb", help="KKCluster spec.controlPlaneLoadBalancer.host")
p.add_argument("--etcd-image-tag", help="ClusterConfiguration etcd.local.imageTag")
p.add_argument("--dns-image-tag", help="ClusterConfiguration dns.imageTag")
p.add_argument("--worker-version", help="the MachineDeployment's Kubernetes version (one minor behind is allowed)")
p.add_argument("--k8s-io-mirror-secret", help="Secret whose hosts.toml points containerd's registry.k8s.io at --registry")
p.add_argument("--node-mask", type=int, default=26, help="node-cidr-mask-size-ipv4 (each node's pod subnet)")
p.add_argument("--no-static-cni", action="store_true", help="no bridge CNI config files: the cluster's CNI writes its own")
p.add_argument("--container-hosts", action="store_true", help="kube-proxy leaves the conntrack table size alone; absolute kubelet eviction thresholds")
p.add_argument("--native-speed", action="store_true",
               help="hosts at native speed: kubeadm's own leader leases and static-pod probes, no TCG values")
p.add_argument("--cgroup-v1", action="store_true", help="kubelet and kubeadm accept a cgroup v1 host")
p.add_argument("--cni-from", help="a rendering whose ClusterResourceSets (and their ConfigMaps) join this one")
a = p.parse_args()
# Either every component version (what the mirror carries) or none: a half-set containerManager would be a
# combination no run means to test.
versions = [a.containerd, a.runc, a.crictl, a.pause]
if a.no_component_overrides and any(versions):
    p.error("--no-component-overrides with --containerd/--runc/--crictl/--pause: choose one")
if not a.no_component_overrides and not all(versions):
    p.error("--containerd, --runc, --crictl and --pause are required (or --no-component-overrides)")
if a.container_hosts and not a.addons_after_init:
    sys.exit("tcg-knobs.py: --container-hosts needs --addons-after-init (kube-proxy's configuration goes there)")

docs = [d for d in yaml.safe_load_all(open(a.src)) if d]


def add_resource_sets(docs, path):
    # Another rendering's ClusterResourceSets and the ConfigMaps/Secrets they list, appended; the Cluster labelled
    # so that their clusterSelectors select it.
    other = [d for d in yaml.safe_load_all(open(path)) if d]
    sets = [d for d in other if d.get("kind") == "ClusterResourceSet"]
    if not sets:
        sys.exit(f"tcg-knobs.py: --cni-from {path} has no ClusterResourceSet")
    have = {(d.get("kind"), d["metadata"]["name"]) for d in docs}
    wanted = {(r["kind"], r["name"]) for c in sets for r in c["spec"].get("resources", [])}
    clusters = [d for d in docs if d.get("kind") == "Cluster"]
    if len(clusters) != 1:
        sys.exit("tcg-knobs.py: --cni-from needs exactly one Cluster in the rendering")
    labels = clusters[0]["metadata"].setdefault("labels", {})
    for c in sets:
        labels.update(c["spec"].get("clusterSelector", {}).get("matchLabels", {}))
    for d in other:
        key = (d.get("kind"), d["metadata"]["name"])
        if key not in have and (d.get("kind") == "ClusterResourceSet" or key in wanted):
            docs.append(d)
    missing = wanted - {(d.get("kind"), d["metadata"]["name"]) for d in docs}
    if missing:
        sys.exit(f"tcg-knobs.py: --cni-from {path} lacks what its ClusterResourceSets apply: {sorted(missing)}")


if a.cni_from:
    add_resource_sets(docs, a.cni_from)


def args(d):
    return [{"name": k, "value": str(v)} for k, v in d.items()]


LEADER = {
    "leader-elect-lease-duration": "120s",
    "leader-elect-renew-deadline": "100s",
    "leader-elect-retry-period": "20s",
}
# kubeadm validates the pod subnet against the node mask it reads from node-cidr-mask-size-ipv4 (with
# node-cidr-mask-size instead, kubeadm init refuses the /25 pod subnet against the default /24 node mask).
# Seconds. kubeadm's defaults (4 min health checks, 1 min API calls) assume a fast machine.
INIT_TIMEOUTS = {
    "controlPlaneComponentHealthCheckSeconds": 1200,
    "kubeletHealthCheckSeconds": 1200,
    "kubernetesAPICallSeconds": 1200,
    "etcdAPICallSeconds": 600,
    "tlsBootstrapSeconds": 1200,
    "discoverySeconds": 1200,
}
PATCH_DIR = "/etc/capkk-test/kubeadm-patches"


def probe_patch(name):
    # A strategic-merge patch kubeadm applies to the static pod manifest (containers merge by name).
    probe = {"timeoutSeconds": 60, "periodSeconds": 20}
    return {
        "path": f"{PATCH_DIR}/{name}+strategic.yaml",
        "permissions": "0644",
        "content": yaml.safe_dump(
            {
                "spec": {
                    "containers": [
                        {
                            "name": name,
                            "startupProbe": dict(probe, failureThreshold=90),
                            "livenessProbe": dict(probe, failureThreshold=30),
                        }
                        # kubeadm's kube-controller-manager has no readinessProbe: a patch adding one
                        # without a handler makes the kubelet refuse the manifest.
                        | ({} if name == "kube-controller-manager" else {"readinessProbe": dict(probe, failureThreshold=30)})
                    ]
                }
            }
        ),
    }


def cni_file(cidr):
    conf = {
        "cniVersion": "1.0.0",
        "name": "capkk-test",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": cidr}]], "routes": [{"dst": "0.0.0.0/0"}]},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return {"path": "/etc/cni/net.d/10-capkk-test.conflist", "permissions": "0644", "content": json.dumps(conf, indent=1)}


# kubeadm's own API client has a fixed 10 s request timeout, and its addon phase lists the DNS Deployments once,
# without a retry: on a busy machine the TCG apiserver takes longer and `kubeadm init` fails there after the
# control plane is up ("addon/coredns: couldn't retrieve DNS addon deployments ... Client.Timeout exceeded"),
# which fails the Machine for good. So `kubeadm init` skips the addon phases and a post-kubeadm
# command runs the same phases of the same kubeadm with the same configuration until they pass (the addons are
# create-or-update: a retry is harmless). The copy of the configuration drops skipPhases: `kubeadm init phase`
# would honour it too. The commands fail the bootstrap if that does not work within the retries.
# The KubeadmControlPlane's postKubeadmCommands also run after a control-plane `kubeadm join` (a rolling
# upgrade's new control plane), which has no init configuration and nothing to add: there each command is a
# no-op (each runs in a shell of its own, so `exit 0` ends only that one; a host's reset removes /run/kubeadm).
ADDONS_CONFIG = "/run/kubeadm/capkk-test-addons.yaml"
INIT_ONLY = "[ -e /run/kubeadm/kubeadm.yaml ] || exit 0; "
ADDONS = [
    INIT_ONLY + "sed -e '/^skipPhases:$/d' -e '/^- addon\\/coredns$/d' -e '/^- addon\\/kube-proxy$/d' /run/kubeadm/kubeadm.yaml"
    f" > {ADDONS_CONFIG} && ! grep -q 'addon/' {ADDONS_CONFIG}",
    INIT_ONLY
    + f"for i in 1 2 3 4 5 6 7 8 9 10; do kubeadm init phase addon all --config {ADDONS_CONFIG} && exit 0; sleep 15; done; exit 1",
]


# kube-proxy's configuration for hosts that share the machine's kernel: it would size nf_conntrack_max, which only
# the machine's network namespace may write ("Permission denied" in a node's). Appended to the retried addon
# phase's configuration, which kubeadm turns into the kube-proxy ConfigMap every node's kube-proxy reads.
KUBE_PROXY_CONTAINER = (
    f"printf '%s\\n' --- 'apiVersion: kubeproxy.config.k8s.io/v1alpha1' 'kind: KubeProxyConfiguration'"
    f" 'conntrack:' '  maxPerCore: 0' >> {ADDONS_CONFIG}"
)


# Node containers share the machine's disk, and the kubelet's default eviction thresholds are shares of it
# (imagefs.available 15 %, nodefs.available 10 %): on a build machine whose disk is mostly caches, every node was
# tainted disk-pressure and no pod scheduled (seen with 35 GB free of a 252 GB file system). Absolute thresholds
# instead, every signal named: a partial evictionHard leaves the signals it does not name without a threshold.
CONTAINER_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "2Gi",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "2Gi",
    "imagefs.inodesFree": "5%",
}


def kubelet_patch(a):
    # kubeadm applies it to the KubeletConfiguration it writes on this node (init and join alike); None when the
    # hosts need nothing changed.
    cfg = {}
    if a.cgroup_v1:
        cfg["failCgroupV1"] = False
    if a.container_hosts:
        cfg["evictionHard"] = CONTAINER_EVICTION_HARD
    if not cfg:
        return None
    return {
        "path": f"{PATCH_DIR}/kubeletconfiguration+merge.yaml",
        "permissions": "0644",
        "content": yaml.safe_dump(cfg),
    }


KUBELET_PATCH = kubelet_patch(a)


def ignore_system_verification(cfg):
    nr = cfg.setdefault("nodeRegistration", {})
    nr["ignorePreflightErrors"] = sorted(set(nr.get("ignorePreflightErrors", [])) | {"SystemVerification"})


def k8s_io_mirror(secret):
    # Written with the bootstrap data, before kubeadm pulls; containerd reads certs.d at every pull.
    return {
        "path": "/etc/containerd/certs.d/registry.k8s.io/hosts.toml",
        "permissions": "0600",
        "contentFrom": {"secret": {"name": secret, "key": "hosts.toml"}},
    }


def route_commands(routes):
    cmds = []
    for r in filter(None, routes.split(",")):
        cidr, via = r.split("=")
        cmds.append(f"ip route replace {cidr} via {via}")
    return cmds


seen = set()
for d in docs:
    kind = d.get("kind")
    if "spec" not in d and kind not in ("KKCluster", "KKMachineTemplate", "KubeadmControlPlane",
                                        "KubeadmConfigTemplate", "MachineDeployment"):
        continue  # e.g. the flannel flavor's ConfigMap: nothing to set, and no spec to add
    spec = d.setdefault("spec", {})
    if kind == "KKCluster":
        spec["registry"] = {
            "privateRegistry": a.registry,
            "auth": {"secretRef": {"name": a.registry_secret}, "plainHTTP": True},
        }
        if a.control_plane_lb:
            spec["controlPlaneLoadBalancer"] = {"host": a.control_plane_lb}
        seen.add(kind)
    elif kind == "KKMachineTemplate":
        if not a.no_component_overrides:
            spec["template"]["spec"]["containerManager"] = {
                "type": "containerd",
                "version": a.containerd,
                "runcVersion": a.runc,
                "crictlVersion": a.crictl,
                "sandboxImage": a.pause,
            }
        # Real apt from the host's configured sources (the local Debian package mirror), indexes refreshed.
        # chrony is left out of the default set: its postinst alone takes minutes under TCG and time sync is
        # not what this test proves (the VMs take their clock from the machine's kvmclock/RTC).
        spec["template"]["spec"]["repository"] = {
            "iso": "none",
            "update": True,
            "packages": ["conntrack", "socat", "ebtables", "ipset", "ipvsadm"],
        }
        seen.add(kind)
    elif kind == "KubeadmControlPlane":
        k = spec["kubeadmConfigSpec"]
        cc = k.setdefault("clusterConfiguration", {})
        if not a.k8s_io_mirror_secret:
            cc["imageRepository"] = a.registry
        cc["encryptionAlgorithm"] = "ECDSA-P256"
        leader = {} if a.native_speed else LEADER
        cc.setdefault("controllerManager", {})["extraArgs"] = args(dict(leader, **{"node-cidr-mask-size-ipv4": str(a.node_mask)}))
        if leader:
            cc.setdefault("scheduler", {})["extraArgs"] = args(leader)
        # A single-member etcd on an emulated disk: fsync latency made the apiserver time out against etcd
        # and crash-loop until kubeadm init gave up. A throwaway test cluster needs no
        # durability across power loss.
        cc.setdefault("etcd", {}).setdefault("local", {})["extraArgs"] = args({"unsafe-no-fsync": "true"})
        if a.etcd_image_tag:
            cc["etcd"]["local"]["imageTag"] = a.etcd_image_tag
        if a.dns_image_tag:
            cc.setdefault("dns", {})["imageTag"] = a.dns_image_tag
        # kubeadm fails on a patches directory that does not exist: only where a patch is written.
        patched = not a.native_speed or KUBELET_PATCH is not None
        ic = k.setdefault("initConfiguration", {})
        ic["timeouts"] = INIT_TIMEOUTS
        if patched:
            ic["patches"] = {"directory": PATCH_DIR}
        if a.untainted_control_plane:
            # An empty list, not an absent one: absent means kubeadm's default control-plane taint.
            ic.setdefault("nodeRegistration", {})["taints"] = []
        jc = k.setdefault("joinConfiguration", {})
        jc["timeouts"] = INIT_TIMEOUTS
        if patched:
            jc["patches"] = {"directory": PATCH_DIR}
        probes = [] if a.native_speed else [
            probe_patch(n) for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
        ]
        k["files"] = k.get("files", []) + probes + ([] if a.no_static_cni else [cni_file(a.pod_cidr)]) + ([k8s_io_mirror(a.k8s_io_mirror_secret)] if a.k8s_io_mirror_secret else [])
        if KUBELET_PATCH:
            k["files"].append(KUBELET_PATCH)
        if a.cgroup_v1:
            ignore_system_verification(ic)
            ignore_system_verification(jc)
        if a.addons_after_init:
            ic["skipPhases"] = ["addon/coredns", "addon/kube-proxy"]
        addons = ADDONS
        if a.container_hosts:
            addons = [ADDONS[0] + " && " + KUBE_PROXY_CONTAINER] + ADDONS[1:]
        cmds = (addons if a.addons_after_init else []) + route_commands(a.cp_routes)
        if cmds:
            k["postKubeadmCommands"] = k.get("postKubeadmCommands", []) + cmds
        seen.add(kind)
    elif kind == "KubeadmConfigTemplate":
        t = spec["template"].setdefault("spec", {})
        jc = t.setdefault("joinConfiguration", {})
        jc["timeouts"] = INIT_TIMEOUTS
        if a.worker_pod_cidr and not a.no_static_cni:
            t["files"] = t.get("files", []) + [cni_file(a.worker_pod_cidr)]
        if a.k8s_io_mirror_secret:
            t["files"] = t.get("files", []) + [k8s_io_mirror(a.k8s_io_mirror_secret)]
        if KUBELET_PATCH:
            t["files"] = t.get("files", []) + [KUBELET_PATCH]
            jc["patches"] = {"directory": PATCH_DIR}
        if a.cgroup_v1:
            ignore_system_verification(jc)
        cmds = route_commands(a.worker_routes)
        if cmds:
            t["postKubeadmCommands"] = t.get("postKubeadmCommands", []) + cmds
        seen.add(kind)
    elif kind == "MachineDeployment" and a.worker_version:
        spec["template"]["spec"]["version"] = a.worker_version
        d["metadata"].setdefault("annotations", {})["machineset.cluster.x-k8s.io/skip-preflight-checks"] = "KubeadmVersionSkew"
        seen.add(kind)

missing = {"KKCluster", "KKMachineTemplate", "KubeadmControlPlane"} | ({"MachineDeployment"} if a.worker_version else set())
missing -= seen
if missing:
    sys.exit(f"tcg-knobs.py: the rendering lacks {sorted(missing)}")
with open(a.dst, "w") as f:
    yaml.safe_dump_all(docs, f, sort_keys=False)
