# syntax=docker/dockerfile:1
# slurm-bridge: one binary for every component (scheduler, controllers, admission, run).
#
#   docker build -t slurm-bridge:0.1.0 .
#
# Build stage: the workspace's pinned toolchain floor (rust-version 1.89) and Cargo.lock.
FROM rust:1.89-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
RUN cargo build --release --locked -p slurm-bridge --bin slurm-bridge \
 && cp target/release/slurm-bridge /slurm-bridge \
 && strip /slurm-bridge

# Runtime: Debian 12 slim (glibc, CA certificates for an https slurmrestd), no shell use at run
# time, non-root (65532, the uid the Helm chart runs as), read-only root file system friendly.
# Same user, entrypoint and binary path as the daemonless hack/build-image.sh image.
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin nonroot
COPY --from=build /slurm-bridge /slurm-bridge
USER 65532:65532
ENTRYPOINT ["/slurm-bridge"]
CMD ["--help"]
