# syntax=docker/dockerfile:1
# The jobgate image: one static binary (serve, worker, setup, token, …) and jobgate-probe, the
# health check a shell-less image needs, on distroless/static as the nonroot user (65532).
#   docker build -t jobgate:local .
# tests/compose_test.go checks the shape of this file (static build, final stage, USER).

# Build stage: the Go release go.mod asks for, pinned.
FROM golang:1.26.8 AS build
WORKDIR /src
# Pure Go (modernc.org/sqlite, pgx): no C toolchain, no libc at run time.
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/jobgate ./cmd/jobgate && \
    go build -trimpath -ldflags="-s -w" -o /out/jobgate-probe ./cmd/deploy/probe && \
    mkdir -p /out/var/lib/jobgate/artifacts /out/var/lib/jobgate/payload-keys

# Run stage: no shell, no package manager. distroless publishes no version tags, so the tag is
# pinned by digest (gcr.io/distroless/static-debian12:nonroot as of 2026-08-26); refresh with
#   crane digest gcr.io/distroless/static-debian12:nonroot
FROM gcr.io/distroless/static-debian12:nonroot@sha256:afa5c872c891853ca7fcf1f12c3edb23f7eeef36189728842dd51042ff57f7ab
COPY --from=build /out/jobgate /out/jobgate-probe /usr/local/bin/
# The file:// artifact and payload key stores' mount points, owned by the runtime user: an empty
# named volume mounted here takes this ownership, so the nonroot process can write to them.
COPY --from=build --chown=65532:65532 /out/var/lib/jobgate /var/lib/jobgate
USER 65532:65532
# 8080: serve's HTTP (MCP, /healthz, /readyz); 9090: --metrics-listen, if set.
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/jobgate"]
CMD ["serve"]
