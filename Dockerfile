# The operator's image: static binaries (the operator and the readiness agent of its cache pods) on a
# distroless base, running as a non-root user.
#   docker build -t example.com/cache-operator:v0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
ARG TARGETOS=linux TARGETARCH=amd64
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" -o /cache-operator ./cmd
# The readiness agent that runs beside each Valkey server (internal/readiness).
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="-s -w" -o /cache-operator-readiness ./cmd/readiness

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /cache-operator /cache-operator-readiness /
USER 65532:65532
ENTRYPOINT ["/cache-operator"]
