# Build, run and test nsqd and nsqlookupd. `make run` and `make test` are
# the two commands the README promises work on a fresh machine.
GO       ?= go
PREFIX   ?= /usr/local
DESTDIR  ?=
BUILD    := build
VERSION  := $(shell sed -n 's/^var Version = "\(.*\)"/\1/p' internal/version/version.go)
LDFLAGS  := -X github.com/nsqgo/nsq/internal/version.Version=$(VERSION)
APPS     := $(notdir $(wildcard apps/*))
BENCHES  := $(notdir $(wildcard bench/bench_*))
TESTFLAGS ?=

.PHONY: all build run test bench vet fmt lint clean

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

# Start nsqlookupd and nsqd on loopback with data under ./data; Ctrl-C stops both.
run: build
	@./scripts/run.sh

vet:
	$(GO) vet ./...

fmt:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }

lint: fmt vet

# Every test, with the race detector.
test: fmt vet
	$(GO) test -race -count=1 -timeout 45m $(TESTFLAGS) ./...

bench: build
	./bench.sh

clean:
	rm -rf $(BUILD) dist
