# syntax=docker/dockerfile:1
# Multi-stage build of the capkk-rs manager: a release build in the Rust image, then only the binary on a
# small distroless base, running as a non-root user.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p capkk-controllers --bin manager && \
    install -D -m 0755 target/release/manager /out/manager

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.source="https://github.com/capkk-rs/capkk-rs" \
      org.opencontainers.image.description="capkk-rs: Cluster API infrastructure provider for SSH-reachable hosts"
COPY --from=build /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
