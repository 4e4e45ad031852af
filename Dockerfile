# syntax=docker/dockerfile:1
# quota-patrol as a container image: a release build on Rust's Debian image, run on
# debian:bookworm-slim as UID 10001. deploy/compose.yaml runs it beside CPA; deploy/README.md
# tells how.
#
#   docker build -t quota-patrol .
#   docker run --rm -v ./quota-patrol.toml:/etc/quota-patrol/quota-patrol.toml:ro \
#     -v quota-patrol-data:/var/lib/quota-patrol --env-file quota-patrol.env -p 127.0.0.1:8390:8390 quota-patrol
#
# The mounted config must listen on all interfaces inside the container
# (`[server] listen = "0.0.0.0:8390"`) and keep its database under /var/lib/quota-patrol.
#
# The image ships no simulator. To try the `demo` command in a container, build with
#   docker build --build-arg FEATURES=demo -t quota-patrol:demo .
#   docker run --rm -p 8390:8390 -p 8320:8320 quota-patrol:demo \
#     demo --listen 0.0.0.0:8390 --router-listen 0.0.0.0:8320

# The workspace's rust-version (Cargo.toml); every locked dependency builds with it.
ARG RUST_VERSION=1.89

FROM docker.io/library/rust:${RUST_VERSION}-slim-bookworm AS builder
# gcc for ring and the bundled SQLite, make for jemalloc's build. Not pinned: Debian stable
# replaces a package's version with each security update, so a pin would break the build.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Cargo features of the binary: empty for production, "demo" to include the simulated CPA.
ARG FEATURES=""
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --no-default-features --features "${FEATURES}" \
    && install -D -m 0755 target/release/quota-patrol /out/quota-patrol

FROM docker.io/library/debian:bookworm-slim
# No ca-certificates or tzdata needed: TLS roots (webpki-roots) and time zones (chrono-tz) are
# compiled into the binary, and it links no OpenSSL.
RUN groupadd --gid 10001 quota-patrol \
    && useradd --uid 10001 --gid 10001 --no-log-init --home-dir /var/lib/quota-patrol \
        --no-create-home --shell /usr/sbin/nologin quota-patrol \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/quota-patrol \
    && install -d -m 0755 /etc/quota-patrol
COPY --from=builder /out/quota-patrol /usr/local/bin/quota-patrol

# serve, check-config and inspect read the config from here unless given --config.
ENV QUOTA_PATROL_CONFIG=/etc/quota-patrol/quota-patrol.toml
# The SQLite database and its WAL; a relative `[database] path` lands here too.
VOLUME ["/var/lib/quota-patrol"]
WORKDIR /var/lib/quota-patrol
USER 10001:10001
# 8390: REST API, status page, /healthz, /readyz, /metrics. 8320: the router, when [router] is set.
EXPOSE 8390 8320
# The daemon stops gracefully on SIGTERM within [server] shutdown_deadline_seconds (default 20 s):
# give it more than Docker's default 10 s (`docker stop -t 30`, compose's stop_grace_period).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=10s --start-period=20s --retries=3 \
    CMD ["quota-patrol", "healthcheck"]
ENTRYPOINT ["quota-patrol"]
CMD ["serve"]
