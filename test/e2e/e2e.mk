# Makefile fragment for the end-to-end test and the quickstart (test/e2e). Included from the top Makefile.
#
#   make e2e               whole lifecycle on real CAPI controllers + sandbox hosts; asserts and times each stage
#   make e2e-gitops        the e2e_* Rust tests (controllers/tests/e2e_gitops.rs): a real Flux applies the cluster
#                          from a git repository, holds a commit while suspended, scales it by commit, reverts a
#                          hand edit, prunes it (needs root; a tier of `make test`, after e2e)
#   make quickstart-sim    the same flow for a person: leaves a Running cluster on simulated nodes (sandbox hosts
#                          with the kubeadm simulator; minutes, no VMs) and says how to explore it. The real-node
#                          `make quickstart` is test/vm/vm.mk's.
#   make quickstart-sim-down   tear it down (hosts, manager, mirror, namespace; the mgmt plane stays)
#   make kubeadm-sim-test  the kubeadm simulator's tests, including init/join/reset on two sandbox hosts

.PHONY: e2e e2e-gitops quickstart-sim quickstart-sim-down kubeadm-sim-test

e2e: kubeadm-sim-test ## end-to-end: 1 CP + 2 workers on 4 sandbox hosts, scale, GitOps diff, delete (needs root)
	test/e2e/e2e.sh run

# A tier of its own (after e2e in TEST_TIERS) so that `make test`'s table shows its time apart from e2e.sh's.
e2e-gitops: flux-bin mgmt-up ## GitOps: a real Flux applies, scales, reverts, prunes a cluster from git (needs root)
	@sel=$$(hack/test-targets.sh e2e) && set -x && $(CARGO) test --workspace --no-fail-fast $$sel -- --nocapture

quickstart-sim: deps ## a cluster on simulated nodes (sandbox hosts, kubeadm simulator), left running (needs root)
	test/e2e/e2e.sh quickstart

quickstart-sim-down: ## tear down what quickstart-sim started
	test/e2e/e2e.sh down

kubeadm-sim-test: ## kubeadm simulator tests (unit + two sandbox hosts; needs root)
	test/kubeadm-sim/sandbox-test.sh
