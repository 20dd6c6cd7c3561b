#!/usr/bin/env bash
# Installs what tenge-trace needs to build and test on Debian/Ubuntu, if it is missing.
# Build: clang, llvm, libbpf-dev (headers), libclang (bindgen). Tests and lab: iproute2,
# tcpdump, tshark, iperf3, bpftool, chromium (renders flamegraphs). Benchmarks: bpftrace,
# linux-perf. Issue 6: prometheus. The TLS test of /metrics: curl, openssl.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have clang || need+=(clang)
have llvm-strip || need+=(llvm)
have clang-format || need+=(clang-format)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
have bpftool || need+=(bpftool)
have ip || need+=(iproute2)
have tcpdump || need+=(tcpdump)
have tshark || need+=(tshark)
have iperf3 || need+=(iperf3)
have bpftrace || need+=(bpftrace)
have perf || need+=(linux-perf)
have ss || need+=(iproute2)
have prometheus || need+=(prometheus)
have promtool || need+=(prometheus)
have chromium || need+=(chromium)
have curl || need+=(curl)
# The NIC lab (lab --link nic): GRO and coalescing knobs, driver counters.
have ethtool || need+=(ethtool)
have openssl || need+=(openssl)
have systemd-analyze || need+=(systemd)
have man || need+=(man-db)
# ring (rustls) is built by the cc crate.
have cc || need+=(gcc)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing ${need[*]}; run as root (sudo $0)" >&2
    exit 1
  fi
  echo "install-deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # tshark asks whether non-root users may capture; answer for it.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need[@]}"
fi
# Debian's prometheus package starts a server on :9090; tests start their own.
if systemctl is-active --quiet prometheus 2>/dev/null; then systemctl stop prometheus || true; fi
have cargo || { echo "install-deps: cargo (Rust >= 1.95) is required" >&2; exit 1; }
