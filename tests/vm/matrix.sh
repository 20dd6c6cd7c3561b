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
# The guests' test binaries, optimized: a guest's 2 vCPUs run the traced
# transfers and the tests' own collectors at once, and unoptimized ones
# took 3.2 times as long (6.12, the probes' three transfers: 181 s, 56 s
# optimized). `make test` runs the same tests unoptimized on this host.
guest_tests=(--test probes --test window_lab --test core_lab --test stages --test paths_lab)
cargo test --release --workspace --no-run "${guest_tests[@]}"
# The test binaries, by target name (the guest runs them as they are).
tests=$(cargo test --release --workspace --no-run "${guest_tests[@]}" --message-format=json 2>/dev/null |
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

# Each kernel's guests in a lane of their own, the lanes side by side: TCG
# runs a guest's vCPUs on one host thread, so one guest at a time left a
# CPU of this 2-CPU host idle. The kernels are fetched first, one by one.
nic_kernels=${TT_VM_NIC_KERNELS-${kernels[*]}}
lanes=()
for kernel in "${kernels[@]}" $nic_kernels; do
  [[ " ${lanes[*]} " == *" $kernel "* ]] || lanes+=("$kernel")
done
for kernel in "${lanes[@]}"; do tests/vm/run.sh "$kernel" --prepare; done

guest() { # NAME RUN.SH-ARGS...: one guest, and its verdict
  local name=$1 start
  shift
  echo "== kernel matrix: Debian $name =="
  start=$(date +%s)
  if tests/vm/run.sh "$@"; then
    echo "== Debian $name: passed in $(( $(date +%s) - start )) s =="
  else
    echo "== Debian $name: FAILED after $(( $(date +%s) - start )) s =="
    return 1
  fi
}
lane() { # KERNEL: its guest, then its guest with two NICs; the failures, one per line
  local kernel=$1
  if [[ " ${kernels[*]} " == *" $kernel "* ]]; then
    guest "$kernel" "$kernel" env TT_VM_PROBES="$TT_VM_PROBES" TT_VM_WINDOW_LAB="$TT_VM_WINDOW_LAB" \
      TT_VM_CORE_LAB="$TT_VM_CORE_LAB" TT_VM_CLI_STAGES="$TT_VM_CLI_STAGES" \
      TT_VM_PATHS_LAB="$TT_VM_PATHS_LAB" tests/vm/in-guest.sh || echo "$kernel" >> "$logs/failed"
  fi
  if [[ " $nic_kernels " == *" $kernel "* ]]; then
    guest "$kernel, two NICs" "$kernel" --net env TT_VM_WINDOW_LAB="$TT_VM_WINDOW_LAB" \
      TT_VM_PATHS_LAB="$TT_VM_PATHS_LAB" tests/vm/in-guest-nic.sh || echo "$kernel (NICs)" >> "$logs/failed"
  fi
}

logs=$(mktemp -d "${TMPDIR:-/tmp}/tt-matrix.XXXXXX")
pids=()
# Job control: each lane leads a process group, which the trap stops whole.
set -m
trap 'kill -TERM -- "${pids[@]/#/-}" 2>/dev/null; wait; rm -rf "$logs"; exit 130' INT TERM
for kernel in "${lanes[@]}"; do
  lane "$kernel" > "$logs/$kernel.log" 2>&1 &
  pids+=($!)
done
echo "matrix: ${lanes[*]} side by side; each kernel's output follows when its guests are done"
for i in "${!lanes[@]}"; do
  wait "${pids[$i]}" || true
  cat "$logs/${lanes[$i]}.log"
done
trap - INT TERM
failed=$(paste -sd, "$logs/failed" 2>/dev/null || true)
rm -rf "$logs"
[ -z "$failed" ] || { echo "matrix: failed on $failed" >&2; exit 1; }
echo "matrix: passed on ${kernels[*]}, and over two NICs on $nic_kernels"
