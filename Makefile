# Release binaries of phasegate: static (CGO_ENABLED=0), for Linux and
# macOS on amd64 and arm64, each in a tar.gz with the README and docs/, and a
# SHA-256 checksum file over the archives.
#
#   make release VERSION=v1.2.3
#   cd dist && sha256sum -c checksums.txt
#
# PLATFORMS narrows the list: make release PLATFORMS=linux/amd64.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST ?= dist
LDFLAGS := -s -w -X main.stampVersion=$(VERSION) -X main.stampCommit=$(COMMIT)

.PHONY: build release clean

# build: the gateway for this machine, with the version stamped.
build:
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o phasegate ./cmd/phasegate

release:
	rm -rf $(DIST)
	mkdir -p $(DIST)
	set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; name=phasegate_$(VERSION)_$${os}_$${arch}; \
	  mkdir -p $(DIST)/$$name; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags '$(LDFLAGS)' -o $(DIST)/$$name/phasegate ./cmd/phasegate; \
	  cp -R README.md docs $(DIST)/$$name/; \
	  tar -C $(DIST) -czf $(DIST)/$$name.tar.gz $$name; \
	  rm -rf $(DIST)/$$name; \
	done
	cd $(DIST) && sha256sum *.tar.gz > checksums.txt
	@cat $(DIST)/checksums.txt

clean:
	rm -rf $(DIST) phasegate
