#!/usr/bin/env bash
# The kernel matrix: the same real-kernel checks on each Debian kernel,
# booted under QEMU (tests/vm/run.sh), with this checkout's binaries.
#
#   tests/vm/matrix.sh [SERIES...]     (default: 6.1 6.12)
#
# In each guest: `check --json` exits 0 and every hook family works
# (tp_btf, raw_tp, tracepoint, fentry, kprobe); each backend alone records
# the kernel's windows and MSS; the window labs (mss-clamp, mss-mismatch,
# sws-stall) match the wire (tcpdump) and ss -ti; stages counts a transfer,
# and only iperf3's under --comm; a CPU profile names a process; time-sliced
# sampling detaches and attaches every probe on each backend family;
# watch --exit-on-alert exits 3 during a clamped transfer.
# Then, on the kernels in TT_VM_NIC_KERNELS (default: the same), a guest with two
# virtio-net NICs joined by QEMU (tests/vm/in-guest-nic.sh): a window lab and
# the path costs over a real driver, against tcpdump, the NICs' counters and
# perf's NAPI polls.
set -euo pipefail
cd "$(dirname "$0")/../.."
kernels=("$@")
[ ${#kernels[@]} -gt 0 ] || kernels=(6.1 6.12)

cargo build --release --workspace
cargo test --workspace --no-run
# The test binaries, by target name (the guest runs them as they are).
tests=$(cargo test --workspace --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])')
bin_of() { awk -v n="$1" '$1 == n { print $2; exit }' <<<"$tests"; }
export TT_VM_PROBES=$(bin_of probes) TT_VM_WINDOW_LAB=$(bin_of window_lab)
export TT_VM_CORE_LAB=$(bin_of core_lab) TT_VM_CLI_STAGES=$(bin_of stages)
export TT_VM_PATHS_LAB=$(bin_of paths_lab)
for var in TT_VM_PROBES TT_VM_WINDOW_LAB TT_VM_CORE_LAB TT_VM_CLI_STAGES TT_VM_PATHS_LAB; do
  [ -x "${!var}" ] || { echo "matrix: no test binary for $var" >&2; exit 1; }
done

failed=()
for kernel in "${kernels[@]}"; do
  echo "== kernel matrix: Debian $kernel =="
  start=$(date +%s)
  if tests/vm/run.sh "$kernel" env TT_VM_PROBES="$TT_VM_PROBES" TT_VM_WINDOW_LAB="$TT_VM_WINDOW_LAB" \
      TT_VM_CORE_LAB="$TT_VM_CORE_LAB" TT_VM_CLI_STAGES="$TT_VM_CLI_STAGES" \
      TT_VM_PATHS_LAB="$TT_VM_PATHS_LAB" tests/vm/in-guest.sh; then
    echo "== Debian $kernel: passed in $(( $(date +%s) - start )) s =="
  else
    echo "== Debian $kernel: FAILED after $(( $(date +%s) - start )) s ==" >&2
    failed+=("$kernel")
  fi
done
for kernel in ${TT_VM_NIC_KERNELS-${kernels[*]}}; do
  echo "== kernel matrix: Debian $kernel, two NICs =="
  start=$(date +%s)
  if tests/vm/run.sh "$kernel" --net env TT_VM_WINDOW_LAB="$TT_VM_WINDOW_LAB" \
      TT_VM_PATHS_LAB="$TT_VM_PATHS_LAB" tests/vm/in-guest-nic.sh; then
    echo "== Debian $kernel, two NICs: passed in $(( $(date +%s) - start )) s =="
  else
    echo "== Debian $kernel, two NICs: FAILED after $(( $(date +%s) - start )) s ==" >&2
    failed+=("$kernel (NICs)")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "matrix: failed on ${failed[*]}" >&2; exit 1; }
echo "matrix: passed on ${kernels[*]}, and over two NICs on ${TT_VM_NIC_KERNELS-${kernels[*]}}"
