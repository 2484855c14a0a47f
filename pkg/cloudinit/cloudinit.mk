# capkk-cloudinit: fuzzing (needs a nightly toolchain and cargo-fuzz; not part of `make test`).

FUZZ_SECONDS ?= 60

.PHONY: fuzz-cloudinit

fuzz-cloudinit: ## fuzz the bootstrap-data parser for FUZZ_SECONDS (needs nightly + cargo-fuzz)
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz
	cd pkg/cloudinit/fuzz && mkdir -p corpus/parse && \
	  $(CARGO) +nightly fuzz run parse corpus/parse seeds/parse -- -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048
