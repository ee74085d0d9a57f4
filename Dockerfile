# roomgate: multi-stage build, small non-root runtime image.
#   docker build -t roomgate .
#   docker run --rm -p 8080:8080 -v $PWD/roomgate.toml:/etc/roomgate/roomgate.toml:ro roomgate
# The image serves /etc/roomgate/roomgate.toml: the embedded default config, listening on 0.0.0.0:8080.

FROM rust:1.95-slim-bookworm AS build
# jemalloc's build runs make, which the slim image lacks.
RUN apt-get update \
 && apt-get install -y --no-install-recommends make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock rustfmt.toml clippy.toml ./
COPY .cargo .cargo
COPY src src
COPY config config
COPY benches benches
# The debug sections go (69 MB to 16 MB); the symbols stay, so a panic's backtrace names its
# functions.
RUN cargo build --release --locked --bin roomgate \
 && strip --strip-debug target/release/roomgate \
 && sed 's/^listen = "127.0.0.1:8080"/listen = "0.0.0.0:8080"/' config/roomgate.toml > /src/roomgate.toml \
 && grep -q '^listen = "0.0.0.0:8080"' /src/roomgate.toml

# distroless/cc: glibc and CA certificates, no shell, runs as uid 65532 ("nonroot").
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/roomgate /usr/local/bin/roomgate
COPY --from=build /src/roomgate.toml /etc/roomgate/roomgate.toml
# Numeric, so that Kubernetes' runAsNonRoot can check it without a runAsUser.
USER 65532:65532
# 8080 HTTP, 8443 HTTPS (with [tls]), 9901 the admin API and its probes (with [admin] listen on
# 0.0.0.0 and a token). deploy/kubernetes runs this image with its own config from a ConfigMap.
EXPOSE 8080 8443 9901
ENTRYPOINT ["/usr/local/bin/roomgate"]
CMD ["run", "--config", "/etc/roomgate/roomgate.toml"]
