# syntax=docker/dockerfile:1
#
# phasegate as a container: a static binary on distroless, run as non-root.
#   docker build -t phasegate .
#   docker run --rm -p 8080:8080 -e DEEPSEEK_API_KEY=... phasegate
#   docker build --build-arg VERSION=v1.2.3 --build-arg COMMIT=$(git rev-parse HEAD) -t phasegate .
# With no provider configured it serves the built-in simulated model.
# There is no shell in the image: the health check is the binary's own
# `phasegate healthcheck` (GET /readyz at LISTEN_ADDR on loopback);
# orchestrators may probe GET /healthz and /readyz over HTTP instead.

# The builder runs on the build machine's platform and cross-compiles, so a
# multi-platform build (--platform linux/amd64,linux/arm64) needs no
# emulation.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
# Modules first, into a cache mount the build step shares: a source change
# does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
# The version and commit `phasegate --version` prints: the image has no
# .git to read them from.
ARG VERSION=devel
ARG COMMIT=unknown
# CGO_ENABLED=0: a static binary with Go's own DNS resolver, so it runs on
# an image with no libc. -trimpath keeps build paths out of the binary.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w -X main.stampVersion=$VERSION -X main.stampCommit=$COMMIT" -o /out/phasegate ./cmd/phasegate

# distroless/static: CA certificates (for the HTTPS upstreams), tzdata and
# /etc/passwd with the nonroot user (65532), nothing else.
FROM gcr.io/distroless/static-debian13:nonroot
COPY --from=build /out/phasegate /phasegate
# Numeric, so Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# LISTEN_ADDR defaults to :8080.
EXPOSE 8080
# Ready means /readyz answers 200: it answers 503 while the gateway drains.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
    CMD ["/phasegate", "healthcheck"]
ENTRYPOINT ["/phasegate"]
