# Sandbox SSH test hosts and the SSH layer's tests. Included by the top-level Makefile.
# Targets: sandbox-up, sandbox-down, sandbox-status, test-ssh, bench-ssh-latency.
SANDBOX_NAME ?= e2e
SANDBOX_HOSTS ?= 4
SANDBOX_INTERNAL_HOSTS ?= 0
SANDBOX_USER ?= root
SANDBOX_CLI = $(CARGO) run -q -p capkk-sandbox --bin sandbox --

.PHONY: sandbox-up sandbox-down sandbox-status test-ssh bench-ssh-latency

sandbox-up: ## Build sandbox $(SANDBOX_NAME) (state + inventory.yaml in /tmp/capkk-sandbox/$(SANDBOX_NAME))
	$(SANDBOX_CLI) up --name $(SANDBOX_NAME) --hosts $(SANDBOX_HOSTS) \
		--internal-hosts $(SANDBOX_INTERNAL_HOSTS) --user $(SANDBOX_USER)

sandbox-down: ## Tear sandbox $(SANDBOX_NAME) down (idempotent)
	$(SANDBOX_CLI) down --name $(SANDBOX_NAME)

sandbox-status: ## show sandbox $(SANDBOX_NAME)'s hosts
	$(SANDBOX_CLI) status --name $(SANDBOX_NAME)

test-ssh: ## SSH client + sandbox harness tests against real sshd hosts (needs root, openssh-server, sudo)
	$(CARGO) test -p capkk-sandbox -p capkk-ssh

bench-ssh-latency: ## Median exec round trip of 100 `true` calls on one connection, with and without TCP_NODELAY
	$(CARGO) test -p capkk-ssh --release --test sandbox_ssh -- measure_exec_round_trip --include-ignored --nocapture
