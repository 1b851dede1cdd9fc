# Build, run and test the daemons (nsqd, nsqlookupd, nsqadmin) and the
# tools. `make run` and `make test` are the two commands the README promises
# work on a fresh machine.
GO       ?= go
PREFIX   ?= /usr/local
DESTDIR  ?=
BUILD    := build
VERSION  := $(shell sed -n 's/^var Version = "\(.*\)"/\1/p' internal/version/version.go)
RELEASE  := $(shell sed -n 's/^var Release = "\(.*\)"/\1/p' internal/version/version.go)
LDFLAGS  := -X github.com/nsqgo/nsq/internal/version.Version=$(VERSION)
APPS     := $(filter-out internal,$(notdir $(wildcard apps/*)))
BENCHES  := $(notdir $(wildcard bench/bench_*))
TESTFLAGS ?=

.PHONY: all build run test bench bench-compare vet fmt lint staticcheck fuzz install dist image clean

all: build

build:
	@mkdir -p $(BUILD)
	@for app in $(APPS); do \
		$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BUILD)/$$app ./apps/$$app || exit 1; \
	done
	@for b in $(BENCHES); do \
		$(GO) build -trimpath -o $(BUILD)/$$b ./bench/$$b || exit 1; \
	done
	@echo "built: $(APPS) $(BENCHES) -> ./$(BUILD)/"

# Start nsqlookupd, nsqd and nsqadmin on loopback with data under ./data; Ctrl-C stops them.
run: build
	@./scripts/run.sh

vet:
	$(GO) vet ./...

fmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

# staticcheck is used when it can be installed (it comes from the module proxy).
STATICCHECK_VERSION ?= v0.8.2
staticcheck:
	@if $(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -version >/dev/null 2>&1; then \
		$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...; \
	else echo "staticcheck $(STATICCHECK_VERSION) not installable here; skipped"; fi

lint: fmt vet staticcheck

# Every test, with the race detector.
# NSQ_REFERENCE (NSQ v1.3.0's binaries, built from the module proxy) is what
# the wire tests compare our daemons' answers with.
test: fmt vet
	@ref=$$(./scripts/nsq-reference.sh) && [ -x "$$ref/nsqd" ] || { \
		echo "test: could not build NSQ v1.3.0 with scripts/nsq-reference.sh" >&2; exit 1; }; \
	NSQ_REFERENCE=$$ref $(GO) test -race -count=1 -timeout 45m $(TESTFLAGS) ./...

# Each fuzz target for FUZZTIME (make test runs their seed corpora).
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run XXX -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	@for app in $(APPS); do install -m 0755 $(BUILD)/$$app $(DESTDIR)$(PREFIX)/bin/$$app || exit 1; done
	install -d $(DESTDIR)$(PREFIX)/share/doc/nsq
	install -m 0644 README.md ChangeLog.md contrib/nsqd.cfg.example contrib/nsqlookupd.cfg.example contrib/nsqadmin.cfg.example $(DESTDIR)$(PREFIX)/share/doc/nsq/

# A versioned tarball of every binary, built with -trimpath and the version stamped in.
DIST := nsq-$(RELEASE).$(shell $(GO) env GOOS)-$(shell $(GO) env GOARCH)
dist: build
	rm -rf dist/$(DIST) && mkdir -p dist/$(DIST)/bin
	cp $(addprefix $(BUILD)/,$(APPS)) dist/$(DIST)/bin/
	cp README.md ChangeLog.md dist/$(DIST)/
	cp -r contrib dist/$(DIST)/
	tar -C dist -czf dist/$(DIST).tar.gz $(DIST)
	@echo "dist/$(DIST).tar.gz"

# An OCI image laid out as NSQ's (contrib/image/Containerfile), built with
# podman or buildah, whichever is installed (Debian: apt-get install buildah).
IMAGE ?= nsqgo/nsq:$(RELEASE)
image:
	@rm -rf $(BUILD)/image && mkdir -p $(BUILD)/image/data
	@for app in $(APPS); do \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BUILD)/image/$$app ./apps/$$app || exit 1; \
	done
	@if command -v podman >/dev/null 2>&1; then podman build -q -f contrib/image/Containerfile -t $(IMAGE) .; \
	elif command -v buildah >/dev/null 2>&1; then buildah bud -q -f contrib/image/Containerfile -t $(IMAGE) .; \
	else echo "make image: needs podman or buildah (Debian: apt-get install buildah)" >&2; exit 1; fi
	@echo "built $(IMAGE)"

bench: build
	./bench.sh

# NSQ v1.3.0's nsqd and ours side by side, started in turn, ROUNDS rounds of
# SCENARIOS; BENCH_COMPARE_FLAGS passes more flags (see bench/bench_compare).
# SCENARIOS=latency runs the end-to-end latency scenario (about 2.5 minutes
# a round), which the default list leaves out.
ROUNDS    ?= 5
SCENARIOS ?= pubsub,disk,replicated,fanout,burt,stats,idle
BENCH_COMPARE_FLAGS ?=
bench-compare: build
	@ref=$$(./scripts/nsq-reference.sh) && [ -x "$$ref/nsqd" ] || { \
		echo "bench-compare: could not build NSQ v1.3.0 with scripts/nsq-reference.sh" >&2; exit 1; }; \
	case "$$ref" in /*) ;; *) ref="$$PWD/$$ref";; esac; \
	echo "# NSQ v1.3.0: $$ref/nsqd; ours: ./$(BUILD)/nsqd; ROUNDS=$(ROUNDS) SCENARIOS=$(SCENARIOS) $(BENCH_COMPARE_FLAGS)" >&2; \
	./$(BUILD)/bench_compare --ours=./$(BUILD) --nsq="$$ref" --rounds=$(ROUNDS) --scenarios=$(SCENARIOS) $(BENCH_COMPARE_FLAGS)

clean:
	rm -rf $(BUILD) dist
