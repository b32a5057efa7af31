# syntax=docker/dockerfile:1
#
# The S3-compatible server of docker-compose.yml (service s3, tagged
# rmq-lakehouse-versitygw:1.8.0): versitygw (Apache-2.0), the release the tests and
# `make run-s3` run (Makefile VERSITYGW_VERSION, tests/s3_server.py), built from the Go
# module proxy the way `make s3` builds it: no prebuilt binary is downloaded.
#
#   docker compose build s3         # or: docker build -f docker/s3.Dockerfile -t rmq-lakehouse-versitygw:1.8.0 docker
#
# docker-compose.yml gives the command: the bucket it makes and the address it listens on
# belong with the clients that use them.

ARG VERSITYGW_VERSION=v1.8.0

# --------------------------------------------------------------------------------------
# build: `go install` of the pinned release (the module's go.mod asks for Go 1.25+)
# --------------------------------------------------------------------------------------
FROM golang:1.26.8-bookworm AS build
ARG VERSITYGW_VERSION
# CGO off: a static binary that needs nothing of the runtime image's libc. -trimpath and
# -s -w keep build paths and the symbol table out of it. -mod=mod as in the Makefile.
RUN CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN=/out \
    go install -trimpath -ldflags="-s -w" \
        "github.com/versity/versitygw/cmd/versitygw@${VERSITYGW_VERSION}"

# --------------------------------------------------------------------------------------
# final: a small Debian with the binary. Not distroless: compose's health check needs a
# shell (bash's /dev/tcp asks GET /health; the image has no curl), and the command makes
# the bucket's directory before it starts the server.
# --------------------------------------------------------------------------------------
FROM debian:12.15-slim
LABEL org.opencontainers.image.title="rmq-lakehouse-versitygw" \
      org.opencontainers.image.description="versitygw (S3 over a POSIX directory) for rmq-lakehouse's warehouse" \
      org.opencontainers.image.licenses="Apache-2.0"

# An unprivileged user. /data is the mount point of the named volume rmq-s3: a new, empty
# volume takes the owner of the image's directory, so the server can write its buckets.
RUN groupadd --system --gid 10001 versitygw \
 && useradd --system --uid 10001 --gid versitygw --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin versitygw \
 && install -d -o versitygw -g versitygw -m 750 /data

COPY --from=build /out/versitygw /usr/local/bin/versitygw

USER versitygw
WORKDIR /data
EXPOSE 7070
