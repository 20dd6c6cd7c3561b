#!/usr/bin/env bash
# Runs inside a matrix guest (tests/vm/matrix.sh), as root, in the checkout.
set -euo pipefail
bin=target/release/tenge-trace
# TT_VM: timing tolerances for an emulated kernel (tests/window_lab.rs).
export CI=true RUST_BACKTRACE=1 TT_VM=1
step() { echo "-- $(uname -r): $*"; }

step "check --json"
$bin check --json > /tmp/check.json
$bin check | sed -n '/hook families/,/^$/p'

# Each test binary, with the named tests only, one at a time.
run() {
  local binary=$1; shift
  step "$(basename "$binary" | sed 's/-[0-9a-f]*$//') $*"
  "$binary" --exact --test-threads=1 "$@"
}
TT_EXPECT_BACKENDS=tp_btf,raw_tp,tracepoint,fentry,kprobe \
  run "$TT_VM_PROBES" every_backend_records_the_kernels_windows_and_mss traces_a_loopback_transfer \
    journeys_carry_the_records_of_every_hook
# The stack tables as sized, and the error of a full one as counted.
run "$TT_VM_PROBES" cpu_samples_resolve_to_kernel_symbols a_full_stack_table_loses_stacks_as_counted
# A socket's writer noted again when it comes back on another CPU.
run "$TT_VM_PROBES" a_writer_that_comes_back_on_another_cpu_is_noted_again
run "$TT_VM_CORE_LAB" recorded_windows_match_the_wire_and_mss_matches_ss
run "$TT_VM_WINDOW_LAB" mss_clamp_windows_match_the_wire mss_mismatch_windows_hold_the_segments_sent \
  sws_stalls_match_zero_window_periods a_handshake_held_back_is_no_send_limit
# The lab's loss program: clsact before TCX (6.6), the kernel's counters of
# loss; Nagle's holds against the delayed ACKs of each kernel.
run "$TT_VM_PATHS_LAB" loss_paths_match_the_kernels_retransmit_and_out_of_order_counts \
  nagle_holds_the_second_part_of_each_request_until_the_delayed_ack
run "$TT_VM_CLI_STAGES" stages_json_on_stdout_of_a_short_transfer \
  stages_by_time_slices_scales_counts_and_times_no_pause \
  stages_with_comm_counts_only_that_commands_flows

step "record --cpu-profile names a process from the kernel"
sh -c 'while :; do :; done' &
spin=$!
$bin record --cpu-profile --port 1 --duration 2 -q -o /tmp/cpu.tt
kill $spin
$bin flamegraph --cpu --folded /tmp/cpu.tt -o /tmp/cpu.folded
grep -q '^sh;' /tmp/cpu.folded || { echo "no stack of the spinning sh"; cut -d';' -f1 /tmp/cpu.folded | sort -u; exit 1; }

# Detached and attached again every slice, on each backend family. Under
# emulation, kprobes and classic tracepoints take hundreds of ms to come and
# go (2 pauses in 2 s on 6.1): two pauses are one whole detach and attach.
for ladder in tp_btf,raw_tp,tracepoint,fentry,kprobe kprobe,tracepoint fentry,raw_tp; do
  step "record by time slices ($ladder)"
  TENGE_TRACE_BACKENDS=$ladder $bin record --sample 4 --slice 50ms --duration 3 -q -o /tmp/sliced.tt
  begins=$($bin dump --kind pause /tmp/sliced.tt | grep -c 'edge=begin' || true)
  ends=$($bin dump --kind pause /tmp/sliced.tt | grep -c 'edge=end' || true)
  echo "$begins pauses"
  [ "$begins" -ge 2 ] && [ "$begins" = "$ends" ] || { echo "$begins begins, $ends ends"; exit 1; }
  $bin report /tmp/sliced.tt | grep -q 'of the time in slices of 50.0 ms' || { $bin report /tmp/sliced.tt | head -3; exit 1; }
done

step "watch --exit-on-alert during a clamped transfer"
timeout 300 $bin watch --exit-on-alert --min-duration 50 > /tmp/watch.out 2>&1 &
watch=$!
sleep 3 # the probes attach
timeout 240 $bin lab --scenario mss-clamp > /tmp/lab.out 2>&1 || true
rc=0
wait $watch || rc=$?
cat /tmp/watch.out | head -5
[ "$rc" -eq 3 ] || { echo "watch --exit-on-alert exited $rc, not 3"; tail -20 /tmp/lab.out; exit 1; }
step "all passed"
