#!/usr/bin/env bash
# Prints the cargo target selection of one Rust test tier, for `cargo test --workspace <selection>`.
#
#   hack/test-targets.sh unit          every lib and bin (unit tests) + the integration tests of the packages
#                                      NOT named in INTEGRATION_PACKAGES
#   hack/test-targets.sh integration   the integration tests of the packages named in INTEGRATION_PACKAGES
#                                      (they need the local management plane)
#   hack/test-targets.sh vm            the integration tests of the packages named in VM_PACKAGES (they boot
#                                      QEMU VMs: their own tier, test-vm)
#
# Every tier selects targets, never packages: all tiers run `cargo test --workspace`, so cargo resolves one
# feature set and no crate is compiled twice (selecting packages with -p/--exclude changes how features
# unify and recompiles tokio, kube, ...). Test target names must be unique in the workspace (checked here),
# since `--test NAME` matches that name in every package.
set -euo pipefail
tier=${1:?usage: $0 unit|integration}
: "${INTEGRATION_PACKAGES:=capkk-mgmt capkk-controllers}"
: "${VM_PACKAGES:=capkk-vm}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
${CARGO:-cargo} metadata --no-deps --format-version 1 --offline 2>/dev/null |
  TIER=$tier INTEGRATION_PACKAGES=$INTEGRATION_PACKAGES VM_PACKAGES=$VM_PACKAGES python3 -c '
import json, os, sys
meta = json.load(sys.stdin)
tier, integration = os.environ["TIER"], set(os.environ["INTEGRATION_PACKAGES"].split())
vm = set(os.environ["VM_PACKAGES"].split())
members = set(meta["workspace_members"])
names, args = {}, []
for pkg in meta["packages"]:
    if pkg["id"] not in members:
        continue
    for t in pkg["targets"]:
        if "test" not in t["kind"]:
            continue
        name, owner = t["name"], pkg["name"]
        if name in names:
            sys.exit("test target %s exists in %s and %s: rename one" % (name, names[name], owner))
        names[name] = owner
        owner_tier = "integration" if owner in integration else "vm" if owner in vm else "unit"
        if owner_tier == tier:
            args += ["--test", t["name"]]
if tier == "unit":
    args = ["--lib", "--bins"] + args
elif tier not in ("integration", "vm"):
    sys.exit(f"unknown tier {tier}")
print(" ".join(args))
'
