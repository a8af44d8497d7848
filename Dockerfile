# Multi-stage build: a static pubsink binary on distroless, as nonroot.
#   docker build -t pubsink .
#   docker run -v $PWD/examples.yaml:/etc/pubsink/config.yaml pubsink
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# `pubsink version` and pubsink_build_info name these (the build context has
# no .git, so Go cannot record the revision itself):
#   docker build --build-arg VERSION=v1.2.3 --build-arg REVISION=$(git rev-parse HEAD) -t pubsink .
ARG VERSION=
ARG REVISION=
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X github.com/pubsink/pubsink/internal/buildinfo.version=${VERSION} -X github.com/pubsink/pubsink/internal/buildinfo.revision=${REVISION}" \
      -o /out/pubsink .
# A writable home for a dead_letter.file, owned by nonroot: a volume mounted
# here takes this ownership.
RUN mkdir -p /out/var/lib/pubsink

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/pubsink /pubsink
COPY --from=build --chown=nonroot:nonroot /out/var/lib/pubsink /var/lib/pubsink
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/pubsink","run","--config","/etc/pubsink/config.yaml"]
