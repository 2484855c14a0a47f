#!/usr/bin/env bash
# Prints the cargo target selection of one Rust test tier, for `cargo test --workspace <selection>`.
#
# A test target's tier is its file name's prefix (docs/testing.md), so where a test goes shows its tier:
#
#   hack/test-targets.sh unit          every lib and bin (unit tests) + the integration tests named none of
#                                      mgmt_*, vm_*, e2e_*, release_* (plain ones need nothing; sandbox_* need
#                                      root for sandbox hosts or namespaces)
#   hack/test-targets.sh integration   the integration tests named mgmt_* (they need the local management
#                                      plane)
#   hack/test-targets.sh vm            the integration tests named vm_* (they boot QEMU VMs: their own tier,
#                                      test-vm)
#   hack/test-targets.sh e2e           the integration tests named e2e_* (whole flows with outside tools, e.g.
#                                      Flux: run by `make e2e-gitops`)
#   hack/test-targets.sh release       the integration tests named release_* (they read what `make release`
#                                      built: run by `make release-test`)
#   hack/test-targets.sh operator      the integration tests named operator_* (the Cluster API Operator, its own
#                                      plane: run by `make test-operator`, not by `make test`)
#
# Every tier selects targets, never packages: all tiers run `cargo test --workspace`, so cargo resolves one
# feature set and no crate is compiled twice (selecting packages with -p/--exclude changes how features
# unify and recompiles tokio, kube, ...). Test target names must be unique in the workspace (checked here),
# since `--test NAME` matches that name in every package.
set -euo pipefail
tier=${1:?usage: $0 unit|integration|vm|e2e|release|operator}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
${CARGO:-cargo} metadata --no-deps --format-version 1 --offline 2>/dev/null |
  TIER=$tier python3 -c '
import json, os, sys
meta = json.load(sys.stdin)
tier = os.environ["TIER"]
if tier not in ("unit", "integration", "vm", "e2e", "release", "operator"):
    sys.exit(f"unknown tier {tier}")
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
        prefixes = {"mgmt_": "integration", "vm_": "vm", "e2e_": "e2e", "release_": "release",
                    "operator_": "operator"}
        target_tier = next((t for p, t in prefixes.items() if name.startswith(p)), "unit")
        if target_tier == tier:
            args += ["--test", name]
if tier == "unit":
    args = ["--lib", "--bins"] + args
print(" ".join(args))
'
