# Rocket Rides. `make dev` runs the whole app locally; `make test` runs the
# suite. Neither needs Docker: without DATABASE_URL both start a
# project-local PostgreSQL cluster under .data/ (server binaries on PATH or
# under /usr/lib/postgresql/*/bin).

SHELL := /bin/bash
GO    ?= go
BIN   := bin
CMDS  := $(notdir $(wildcard cmd/*))

# Development defaults (see .env.example). Anything already in the
# environment wins.
export STRIPE_API_KEY   ?= sk_test_rocketrides_dev
# Every listener binds to loopback: the Stripe fake answers anyone with
# any sk_ key, and the api's metrics are unauthenticated.
export FAKESTRIPE_HOST  ?= 127.0.0.1
export FAKESTRIPE_PORT  ?= 12111
export API_HOST         ?= 127.0.0.1
export API_PORT         ?= 5000
export API_METRICS_ADDR ?= 127.0.0.1:9100
export STRIPE_API_BASE  ?= http://127.0.0.1:$(FAKESTRIPE_PORT)
export SIMULATED_ERRORS ?= true
# The simulator sends a ride a second with one token, far past the rate
# limits' defaults; RATE_LIMITS=on make dev shows them refusing it.
export RATE_LIMITS      ?= off
# The operator's console (cmd/console). It has no account of its own:
# make dev adds this one (console operator add -reset) before it starts
# anything, and prints it. Make variables only, not settings: no process
# reads them.
export CONSOLE_HOST     ?= 127.0.0.1
export CONSOLE_PORT     ?= 5050
DEV_OPERATOR            ?= dev
DEV_OPERATOR_PASSWORD   ?= rocketrides-dev
# The Stripe fake keeps its charges here, as Postgres keeps the rides, so
# that a second make dev finds both; make clean removes it with .data.
export FAKESTRIPE_STATE ?= $(CURDIR)/.data/fakestripe/state.jsonl

# Traces: make dev TRACES=on also runs Jaeger (Procfile.traces, configured
# by scripts/jaeger.yaml), built into .data/tools once with the Go
# toolchain; every process sends it every trace (the OTEL_* settings), and
# the console's story links each request to its trace there
# (CONSOLE_TRACE_URL). No process reads the JAEGER_* variables: they go to
# Procfile.traces and scripts/jaeger.yaml. Without TRACES=on, none of this
# is exported and make dev runs as it always has.
TRACES                 ?= off
JAEGER_VERSION         := v1.76.0
JAEGER                 := .data/tools/jaeger-$(JAEGER_VERSION)
JAEGER_OTLP_GRPC_PORT  ?= 4317
JAEGER_OTLP_HTTP_PORT  ?= 4318
JAEGER_UI_PORT         ?= 16686
JAEGER_QUERY_GRPC_PORT ?= 16685
ifeq ($(filter $(TRACES),on off),)
$(error TRACES=$(TRACES): must be on or off)
endif
DEV_PROCFILE := Procfile
ifeq ($(TRACES),on)
DEV_PROCFILE := .data/Procfile.traces
export JAEGER JAEGER_OTLP_GRPC_PORT JAEGER_OTLP_HTTP_PORT JAEGER_UI_PORT JAEGER_QUERY_GRPC_PORT
export OTEL_EXPORTER_OTLP_ENDPOINT ?= http://127.0.0.1:$(JAEGER_OTLP_GRPC_PORT)
export OTEL_EXPORTER_OTLP_PROTOCOL ?= grpc
export OTEL_TRACES_SAMPLER         ?= always_on
export CONSOLE_TRACE_URL           ?= http://127.0.0.1:$(JAEGER_UI_PORT)/api/traces/{trace_id}
endif

# 0 is any free port. make dev picks it before starting anything, so that
# the simulator, the console and the printed URLs all use the port taken.
dev_ports := FAKESTRIPE_PORT API_PORT CONSOLE_PORT \
	$(if $(filter on,$(TRACES)),JAEGER_OTLP_GRPC_PORT JAEGER_OTLP_HTTP_PORT JAEGER_UI_PORT JAEGER_QUERY_GRPC_PORT)
define free_port
ifeq ($$($(1)),0)
override $(1) := $$(shell scripts/free-port $$(foreach p,$$(dev_ports),$$($$(p))))
endif
endef
$(foreach port,$(dev_ports),$(eval $(call free_port,$(port))))

# An execution count, not a duration: with a duration, Go 1.26's fuzzing
# coordinator can report "context deadline exceeded" as a failure when the
# time runs out while a worker is busy (golang/go#75804, fixed in Go 1.27).
# 20000 executions take a few seconds per target here.
FUZZTIME ?= 20000x
FUZZ_TARGETS := FuzzParams FuzzEquivalentEncodings FuzzIdempotencyKey

.PHONY: dev stop test lint fuzz chaos bench build db migrate seed vet fmt generate docs clean clientcheck

## dev: local Postgres, migrations, the console's dev account (printed), then
## every Procfile process. Ctrl-C stops them all, and the local Postgres too
## when make dev started it. TRACES=on adds Jaeger, every trace sent to it
dev: build $(if $(filter on,$(TRACES)),$(JAEGER) $(DEV_PROCFILE))
	@set -euo pipefail; \
	if [ -z "$${DATABASE_URL:-}" ] && ! $(BIN)/localpg status >/dev/null 2>&1; then \
		trap 'echo "stopping the project-local Postgres"; $(BIN)/localpg stop' EXIT; \
		trap 'exit 0' INT TERM; \
	fi; \
	export DATABASE_URL="$${DATABASE_URL:-$$($(BIN)/localpg url rocketrides)}"; \
	$(BIN)/migrate up; \
	printf '%s\n' '$(DEV_OPERATOR_PASSWORD)' | $(BIN)/console operator add -reset '$(DEV_OPERATOR)' >/dev/null; \
	runner=$$(scripts/procfile-runner $(DEV_PROCFILE)); \
	echo "database: $$DATABASE_URL"; \
	echo "stripe:   $$STRIPE_API_BASE (the fake keeps its charges in $$FAKESTRIPE_STATE)"; \
	echo "api:      http://$$API_HOST:$$API_PORT"; \
	echo "metrics:  http://$$API_METRICS_ADDR/metrics"; \
	echo "console:  http://$$CONSOLE_HOST:$$CONSOLE_PORT (account $(DEV_OPERATOR), password $(DEV_OPERATOR_PASSWORD))"; \
	if [ "$(TRACES)" = on ]; then \
		echo "traces:   http://127.0.0.1:$(JAEGER_UI_PORT) (Jaeger; a trace at /api/traces/{trace_id}, linked from each request's story)"; \
	fi; \
	$$runner

# Jaeger's module replaces one of its dependencies (a replace directive in
# its go.mod), which go install refuses: it is built in its own module, as
# the Go toolchain downloads it, with that module's own requirements.
$(JAEGER):
	@echo "building Jaeger $(JAEGER_VERSION), the trace viewer of make dev TRACES=on, into .data/tools with the Go toolchain: once, and several minutes the first time (README.md)"
	@mkdir -p $(@D)
	@set -euo pipefail; \
	module=$$(cd / && $(GO) mod download -json github.com/jaegertracing/jaeger@$(JAEGER_VERSION)) || { echo "$$module" >&2; exit 1; }; \
	src=$$(echo "$$module" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p'); \
	cd "$$src"; \
	$(GO) build -trimpath -o $(CURDIR)/$@.tmp ./cmd/jaeger; \
	mv $(CURDIR)/$@.tmp $(CURDIR)/$@

# The Procfile and Jaeger beside it.
.data/Procfile.traces: Procfile Procfile.traces
	@mkdir -p $(@D)
	@cat $^ > $@

## stop: stop every project-local server, saying which it stopped: the cluster
## (make dev, make test), the replicated cluster (etcd and Patroni) and the pooler
stop: build
	@$(BIN)/localpg stop
	@if command -v patroni >/dev/null 2>&1; then $(BIN)/localpg ha stop; fi
	@if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then $(BIN)/localpg pooler stop; fi

## test: vet, lint, the whole suite against real Postgres, River and the Stripe fake,
## then each fuzz target briefly
test:
	$(GO) vet ./...
	cd client && $(GO) vet ./...
	@$(MAKE) --no-print-directory lint
	$(GO) test -count=1 -timeout 9m ./...
	cd client && $(GO) test -count=1 ./...
	@$(MAKE) --no-print-directory fuzz

## fuzz: run each fuzz target for FUZZTIME (default 20000 executions; a duration such as 60s works too)
fuzz:
	@for target in $(FUZZ_TARGETS); do \
		$(GO) test ./internal/rides -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

## chaos: the soak: api instances, completers, enqueuers and a worker as
## real processes under SIGKILLs, Postgres restarts, Stripe faults and, with
## -network (on by default), faults on every wire between them, then every
## invariant (e.g. CHAOS_FLAGS="-duration 5m -clients 32 -seed 1 -keep -network",
## which replaces the default flags); -failover -replication sync|strict|relaxed|async
## runs the failover drill on Patroni (-drill leader|standby|agent), -pooler goes
## through PgBouncer
CHAOS_FLAGS ?= -duration 60s -network
chaos:
	$(GO) run ./cmd/chaos $(CHAOS_FLAGS)

## bench: throughput, latency and memory against the database's own limit,
## on a scratch cluster of its own; figures also in .data/bench/results.json
bench:
	$(GO) run ./cmd/bench -json .data/bench/results.json

## clientcheck: build each of the project's own clients (the list is
## clientcheck.ProjectClients) and run it against every case of the
## conformance harness, the app's death included; prints a report for each
clientcheck:
	$(GO) run ./cmd/clientcheck -listen 127.0.0.1:0 -project

## build: every command into bin/ (the first build compiles every
## dependency too, a few minutes: README.md says how long; later ones take seconds)
build:
	@mkdir -p $(BIN)
	@[ -x $(BIN)/api ] || echo "building every command into $(BIN)/; the first build compiles all their dependencies and takes a few minutes (README.md)"
	$(GO) build -o $(BIN)/ ./cmd/...

## db: start the project-local Postgres cluster and print its URL
db: build
	@$(BIN)/localpg url rocketrides

migrate: build
	DATABASE_URL="$${DATABASE_URL:-$$($(BIN)/localpg url rocketrides)}" $(BIN)/migrate up

vet:
	$(GO) vet ./...
	cd client && $(GO) vet ./...

## lint: golangci-lint with the project's rules (.golangci.yml), pinned in tools/lint/go.mod,
## over the server's module and the client's (client/, a module of its own); it runs
## beside another lint on the machine (an editor's, a second checkout's) instead of failing
lint:
	$(GO) tool -modfile=tools/lint/go.mod golangci-lint run --allow-parallel-runners ./...
	cd client && $(GO) tool -modfile=../tools/lint/go.mod golangci-lint run --config ../.golangci.yml --allow-parallel-runners ./...

fmt:
	gofmt -l -w .

## generate: rewrite the code generated from docs/openapi.yaml (the Go client
## in internal/testkit/apiclient) with the pinned oapi-codegen; commit the result
generate:
	$(GO) generate ./...

## docs: rewrite docs/configuration.md (every process's settings, from what each
## reads) and the project's setting names (internal/platform/config/known.go);
## commit the result (a test fails until they are current)
docs:
	$(GO) run ./internal/proof/configdoc

## clean: stop the local servers (make stop) and remove binaries and local data
clean:
	-@[ -x $(BIN)/localpg ] && $(MAKE) --no-print-directory stop
	rm -rf $(BIN) .data
