# The two commands of the README:
#   make lab    installs what is missing, builds, and traces a real transfer between two namespaces
#   make test   installs what is missing, builds, and runs every test (root: real kernel, real BPF)
CARGO ?= cargo
SCENARIO ?= mss-clamp
BIN = target/release/tenge-trace

.PHONY: deps build lab test lint bench man deb deb-check clean matrix vm-test sweep fuzz
deps:
	./scripts/install-deps.sh

build: deps
	$(CARGO) build --release --workspace

lab: build
	$(BIN) lab --scenario $(SCENARIO)

test: deps
	$(CARGO) test --workspace --features tenge-trace-cli/bench -- --test-threads=2

# The kernel matrix (tests/vm): Debian's 6.1 and 6.12 under QEMU, the same
# real-kernel checks in each. `make vm-test KERNEL=6.1 CMD='...'` runs one
# command in one guest.
KERNELS ?= 6.1 6.12
KERNEL ?= 6.12
CMD ?= target/release/tenge-trace check
matrix: deps
	tests/vm/matrix.sh $(KERNELS)

vm-test: build
	tests/vm/run.sh $(KERNEL) $(CMD)

# The ground-truth sweep in full (48 transfers against TCP_INFO polled every
# 2 ms; `make test` runs one in four), then 24 of settings drawn from values
# none of those use.
sweep: deps
	TT_SWEEP=full $(CARGO) test --release --test sweep -- --nocapture
	TT_SWEEP=other $(CARGO) test --release --test sweep findings_agree -- --nocapture

# The recordings' fuzz harness in full (tests/fuzz.rs): 10 million mutated
# recordings through dump, report and flamegraph; `make test` runs 5000.
FUZZ_INPUTS ?= 10000000
fuzz: deps
	TT_FUZZ_INPUTS=$(FUZZ_INPUTS) TT_FUZZ_SEED=$${TT_FUZZ_SEED:-$$(date +%s)} $(CARGO) test --profile fuzz --test fuzz -- --nocapture

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --workspace --all-targets --features tenge-trace-cli/bench -- -D warnings
	clang-format --dry-run --Werror bpf/*.c bpf/*.h

# The benchmark is a development tool: built with the `bench` feature, not
# part of the binary `make build` and the .deb ship.
bench: deps
	$(CARGO) build --release -p tenge-trace-cli --features bench
	$(BIN) bench

clean:
	$(CARGO) clean

# Man pages and completions (target/docs), and a Debian package (needs cargo-deb).
man: build
	rm -rf target/docs
	$(BIN) gen-docs --out target/docs

deb: man
	command -v cargo-deb >/dev/null || $(CARGO) install cargo-deb --locked
	$(CARGO) deb -p tenge-trace-cli --no-build

# The package installed and removed with dpkg on this host (root).
deb-check: deb
	./scripts/deb-check.sh
