#!/usr/bin/env bash
# Runs inside the two-NIC guest (tests/vm/run.sh --net, from matrix.sh), as
# root, in the checkout: the lab over eth0 and eth1 (virtio_net, joined by
# QEMU), a real driver's NAPI, GRO and counters instead of veth's.
set -euo pipefail
bin=target/release/tenge-trace
export CI=true RUST_BACKTRACE=1 TT_VM=1 TT_LAB_LINK=nic:eth0,eth1
step() { echo "-- $(uname -r), NICs: $*"; }
mtu() { cat "/sys/class/net/$1/mtu"; }

before="$(mtu eth0) $(mtu eth1)"
step "lab --link nic:eth0,eth1 --scenario mss-clamp"
$bin lab --link nic:eth0,eth1 --scenario mss-clamp --bytes 4000000 > /tmp/lab.out 2>&1
sed -n 1,12p /tmp/lab.out
grep -qE "NICs eth0 (→|->) eth1" /tmp/lab.out || { echo "lab did not run over the NICs"; exit 1; }

run() {
  local binary=$1; shift
  step "$(basename "$binary" | sed 's/-[0-9a-f]*$//') $*"
  "$binary" --exact --test-threads=1 --nocapture "$@"
}
run "$TT_VM_WINDOW_LAB" mss_clamp_windows_match_the_wire
run "$TT_VM_PATHS_LAB" nic_stages_match_its_counters_and_napi_polls_match_perf

# The NICs are lent, not kept: back here with the MTU they had.
after="$(mtu eth0) $(mtu eth1)"
[ "$before" = "$after" ] || { echo "NIC MTUs were $before, are $after"; exit 1; }
ip netns list | grep -q . && { echo "namespaces left: $(ip netns list)"; exit 1; }
step "all passed"
