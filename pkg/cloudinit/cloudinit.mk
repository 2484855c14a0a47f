# capkk-cloudinit: fuzzing (needs a nightly toolchain and cargo-fuzz; not part of `make test`).

FUZZ_SECONDS ?= 60
# A number of executions instead of a time (the security review asks for >= 1,000,000 in total).
FUZZ_RUNS ?=

.PHONY: fuzz-cloudinit

fuzz-cloudinit: ## fuzz the bootstrap-data parser for FUZZ_SECONDS or FUZZ_RUNS executions (nightly + cargo-fuzz)
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	cd pkg/cloudinit/fuzz && mkdir -p corpus/parse && \
	  $(CARGO) +nightly fuzz run parse corpus/parse seeds/parse -- \
	  $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS),-max_total_time=$(FUZZ_SECONDS)) -rss_limit_mb=2048
