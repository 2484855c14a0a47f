# syntax=docker/dockerfile:1
# The capkk-rs manager image: only the manager binary (cargo profile `image`) on a small base without a shell,
# running as a non-root user.
#
# Docker with public registries:  docker build -t capkk-manager .    (the default target compiles in `build`)
# Without a registry (`make image`, hack/image.sh): the runtime base is made locally from Debian packages
# (hack/image-bases.sh) and passed as RUNTIME_IMAGE; the manager is compiled on the host into a cache outside
# the clone and the target `prebuilt` copies it in (build context: a directory holding only `manager`).
# `make image IMAGE_BUILD=container` runs the default target under podman with a locally made BUILD_IMAGE.
ARG BUILD_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY . .
# Registry and target caches make rebuilds incremental; the binary is copied out of the cache mount.
RUN --mount=type=cache,id=capkk-cargo-registry,target=/usr/local/cargo/registry \
    --mount=type=cache,id=capkk-image-target,target=/src/target \
    cargo build --profile image --locked -p capkk-controllers --bin manager && \
    install -D -m 0755 target/image/manager /out/manager

# Everything of the image but the binary; no RUN, so building it needs no shell in the base.
FROM ${RUNTIME_IMAGE} AS runtime
LABEL org.opencontainers.image.source="https://github.com/capkk-rs/capkk-rs" \
      org.opencontainers.image.description="capkk-rs: Cluster API infrastructure provider for SSH-reachable hosts" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
ENTRYPOINT ["/manager"]

# `make image`: the manager compiled on the host (glibc no newer than the runtime base's; make image checks
# that it runs).
FROM runtime AS prebuilt
COPY manager /manager

# The default target (last stage): the manager compiled in the build stage.
FROM runtime
COPY --from=build /out/manager /manager
