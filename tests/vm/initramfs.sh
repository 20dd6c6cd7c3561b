#!/usr/bin/env bash
# Builds the guest's initramfs for an unpacked linux-image package:
#   tests/vm/initramfs.sh PKGROOT OUT.gz
# busybox, the modules the guest needs (with their dependencies, decompressed:
# busybox insmod reads plain .ko only) and tests/vm/init.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pkgroot=$1 out=$2
kver=$(ls "$pkgroot/lib/modules")
mods=$pkgroot/lib/modules/$kver
# 9p to reach the host's root; veth, qdiscs and classifiers for the labs;
# virtio_net for the real-NIC lab; inet_diag and tcp_diag for ss.
wanted="virtio_pci 9pnet_virtio 9p veth sch_netem sch_tbf sch_htb sch_ingress cls_bpf virtio_net inet_diag tcp_diag"
depmod -b "$pkgroot" "$kver"

# Dependencies first, each once (modules.dep: "path: dep1 dep2 ...").
declare -A seen=()
order=()
visit() {
  local path=$1 line dep
  [ -n "${seen[$path]:-}" ] && return
  seen[$path]=1
  line=$(grep -m1 "^$path:" "$mods/modules.dep" | cut -d: -f2-)
  for dep in $line; do visit "$dep"; done
  order+=("$path")
}
for name in $wanted; do
  path=$(awk -F: -v n="$name" '{ f=$1; sub(/.*\//, "", f); sub(/\.ko(\.xz|\.zst)?$/, "", f);
         gsub(/-/, "_", f); if (f == n) { print $1; exit } }' "$mods/modules.dep")
  if [ -z "$path" ]; then
    grep -q "/$name.ko" "$mods/modules.builtin" 2>/dev/null || echo "initramfs: no module $name" >&2
    continue
  fi
  visit "$path"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{bin,dev,proc,sys,mnt,out,modules}
cp /bin/busybox "$work/bin/busybox"
for tool in sh mount umount insmod mkdir chroot poweroff cat echo sleep sed; do
  ln -s busybox "$work/bin/$tool"
done
i=0
for path in "${order[@]}"; do
  dst=$(printf '%s/modules/%02d-%s' "$work" "$i" "$(basename "${path%%.ko*}").ko")
  case "$path" in
    *.xz) xz -dc "$mods/$path" > "$dst" ;;
    *.zst) zstd -dcq "$mods/$path" > "$dst" ;;
    *) cp "$mods/$path" "$dst" ;;
  esac
  i=$((i + 1))
done
cp "$here/init" "$work/init"
chmod +x "$work/init"
(cd "$work" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
