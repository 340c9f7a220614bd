# Multi-stage build: compile tidemark (RocksDB's C++ build takes ~11 minutes on 2 cores), then
# copy the binary into a small Debian runtime image that runs as a non-root user.
FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev clang cmake pkg-config libssl-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY crates crates
COPY schemas schemas
COPY benches benches
RUN cargo build --release --locked --bin tidemark

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g libstdc++6 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/tidemark --shell /usr/sbin/nologin tidemark \
 && mkdir -p /var/lib/tidemark \
 && chown tidemark /var/lib/tidemark
COPY --from=build /src/target/release/tidemark /usr/local/bin/tidemark
COPY schemas /usr/share/tidemark/schemas
COPY examples /usr/share/tidemark/examples
USER tidemark
WORKDIR /var/lib/tidemark
VOLUME ["/var/lib/tidemark"]
EXPOSE 9464
ENTRYPOINT ["tidemark"]
CMD ["--help"]
