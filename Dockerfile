# syntax=docker/dockerfile:1
# The capkk-rs manager image: a release build in a Rust image, then only the binary on a small base without a
# shell, running as a non-root user.
#
# Docker with public registries:  docker build -t capkk-manager .
# Without a registry (`make image`): both bases are made locally from Debian packages (hack/image-bases.sh) and
# passed as BUILD_IMAGE / RUNTIME_IMAGE; the same stages run under podman/buildah.
ARG BUILD_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY . .
# Registry and target caches make rebuilds incremental; the binary is copied out of the cache mount.
RUN --mount=type=cache,id=capkk-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=capkk-image-target,target=/src/target \
    cargo build --release --locked -p capkk-controllers --bin manager && \
    install -D -m 0755 target/release/manager /out/manager

FROM ${RUNTIME_IMAGE}
LABEL org.opencontainers.image.source="https://github.com/capkk-rs/capkk-rs" \
      org.opencontainers.image.description="capkk-rs: Cluster API infrastructure provider for SSH-reachable hosts" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
