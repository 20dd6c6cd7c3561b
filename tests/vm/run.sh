#!/usr/bin/env bash
# Boots a Debian kernel under QEMU and runs a command in it, on this host's
# tools and this checkout's binaries: the host's root filesystem is shared
# read-only over 9p and the guest chroots into it (tmpfs on /tmp and /run).
#
#   tests/vm/run.sh SERIES [--net] COMMAND...
#
# SERIES is 6.1 or 6.12 (Debian 12's stock and updates kernels; the newest
# ABI of the series in the archive is used) or a linux-image package name.
# --net adds two virtio-net NICs joined to each other (a real driver).
# The command runs as root in the directory it was started from; its output
# comes back through a writable 9p share, and its exit status is ours.
# Kernels and initramfs are cached under target/vm.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
series=${1:?usage: tests/vm/run.sh SERIES [--net] COMMAND...}
shift
net=0
[ "${1:-}" = --net ] && { net=1; shift; }
[ $# -gt 0 ] || { echo "vm: no command" >&2; exit 2; }
cache=${TT_VM_CACHE:-$top/target/vm}
timeout_s=${TT_VM_TIMEOUT:-1800}

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] && /bin/busybox --list | grep -x insmod >/dev/null || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v depmod >/dev/null || need+=(kmod)
command -v xz >/dev/null || need+=(xz-utils)
if [ ${#need[@]} -gt 0 ]; then
  echo "vm: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2 ||
    { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2; }
fi

# The package: the newest ABI of the series that the archive has.
newest() {
  apt-cache search --names-only "$1" | awk '{print $1}' | sort -V | tail -n 1
}
case "$series" in
  6.1) pattern='^linux-image-6\.1\.0-[0-9]+-amd64$' ;;
  6.12) pattern='^linux-image-6\.12\.[0-9]+\+deb12-amd64$' ;;
  linux-image-*) pattern="^${series//./\\.}\$" ;;
  *) echo "vm: unknown kernel series $series (6.1, 6.12 or a linux-image package)" >&2; exit 2 ;;
esac
pkg=$(newest "$pattern")
[ -n "$pkg" ] || { apt-get update -q >&2; pkg=$(newest "$pattern"); }
[ -n "$pkg" ] || { echo "vm: no package matches $pattern" >&2; exit 1; }

kdir=$cache/$pkg
if [ ! -d "$kdir/root/boot" ]; then
  echo "vm: fetching $pkg" >&2
  rm -rf "$kdir" && mkdir -p "$kdir/dl"
  (cd "$kdir/dl" && apt-get download "$pkg" >&2)
  dpkg-deb -x "$kdir"/dl/*.deb "$kdir/root"
  rm -rf "$kdir/dl"
fi
# Built anew whenever the recipe changes.
initramfs=$kdir/initramfs-$(cat "$here/initramfs.sh" "$here/init" | sha1sum | cut -c1-12).gz
if [ ! -f "$initramfs" ]; then
  rm -f "$kdir"/initramfs*.gz
  "$here/initramfs.sh" "$kdir/root" "$initramfs"
fi
vmlinuz=$(ls "$kdir"/root/boot/vmlinuz-*)

# The command, and where its output comes back.
# TT_VM_OUT keeps the share: what the command writes to /run/out stays there.
if [ -n "${TT_VM_OUT:-}" ]; then
  out=$TT_VM_OUT && mkdir -p "$out" && rm -f "$out/rc" "$out/log"
else
  out=$(mktemp -d "${TMPDIR:-/tmp}/tt-vm.XXXXXX")
  trap 'rm -rf "$out"' EXIT
fi
{
  echo "cd $(printf '%q' "$PWD")"
  for var in CI PATH HOME RUST_BACKTRACE RUST_LOG TT_BACKEND; do
    [ -n "${!var:-}" ] && echo "export $var=$(printf '%q' "${!var}")"
  done
  printf '%q ' "$@"
  echo
} > "$out/cmd"

netargs=()
if [ $net -eq 1 ]; then
  port=$((20000 + RANDOM % 20000))
  netargs=(-netdev "socket,id=n1,listen=127.0.0.1:$port" -device "virtio-net-pci,netdev=n1,mac=52:54:00:00:00:01"
           -netdev "socket,id=n2,connect=127.0.0.1:$port" -device "virtio-net-pci,netdev=n2,mac=52:54:00:00:00:02")
fi
# TCG runs the vCPUs on one host thread: with one thread per vCPU, a
# tracepoint patched live (text_poke_bp's int3, as BPF links attach and
# detach) while the other vCPU runs it oopsed the 6.12 guest ("Oops: int3"
# in __netif_rx) about one run in five.
accel=tcg,thread=single
grep -qwE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ] && accel=kvm
start=$(date +%s)
# timeout leads a process group of its own: stopping this script stops it
# (and it the guest) only through the trap.
timeout "$timeout_s" qemu-system-x86_64 -accel "$accel" -cpu max -m 3072 -smp 2 \
  -nographic -no-reboot -nic none "${netargs[@]}" \
  -kernel "$vmlinuz" -initrd "$initramfs" \
  -append "console=ttyS0 panic=-1 quiet noautogroup" \
  -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$out,mount_tag=out,security_model=none" \
  </dev/null >"$out/console" 2>&1 &
guest=$!
trap 'kill "$guest" 2>/dev/null; exit 130' INT TERM
wait "$guest" || true
trap - INT TERM
cat "$out/log" 2>/dev/null || true
if [ ! -f "$out/rc" ]; then
  echo "vm: $pkg did not finish the command (timeout ${timeout_s}s or crash); console:" >&2
  # From the kernel's first complaint, else the end.
  first=$(grep -n -m1 -E 'BUG|Oops|WARNING|panic|watchdog|stall' "$out/console" | cut -d: -f1)
  if [ -n "$first" ]; then tail -n "+$first" "$out/console" | head -n 80 >&2; else tail -n 40 "$out/console" >&2; fi
  exit 1
fi
rc=$(cat "$out/rc")
echo "vm: $pkg: exit $rc after $(( $(date +%s) - start )) s" >&2
exit "$rc"
