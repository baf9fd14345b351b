# syntax=docker/dockerfile:1

# One image for every process in the Procfile; docker-compose.yml picks
# the command per service (api, enqueuer, worker, completer, reaper,
# simulator, fakestripe, and the one-shot migrate and seed).
#
#   docker build -t rocketrides .
#   docker run --rm -e DATABASE_URL=... rocketrides migrate up

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a change to the source does not fetch them again.
# client/ is a module of its own that go.mod replaces with the directory.
COPY go.mod go.sum ./
COPY client/go.mod client/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Static binaries: the runtime image has no libc. -trimpath keeps the
# builder's paths out of them, -s -w the symbol tables.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/bin/ ./cmd/... \
 && mkdir -p /out/mail

# distroless static: CA certificates (for api.stripe.com), tzdata and a
# nonroot user, and no shell or package manager to attack.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bin/ /usr/local/bin/
# The worker's MAIL_DIR. A named volume mounted here starts as a copy of
# this directory, so it is writable by nonroot (uid 65532).
COPY --from=build --chown=65532:65532 /out/mail /var/lib/rocketrides/mail
ENV MAIL_DIR=/var/lib/rocketrides/mail \
    PATH=/usr/local/bin:/usr/bin:/bin
USER nonroot:nonroot
EXPOSE 5000 12111
CMD ["api"]
