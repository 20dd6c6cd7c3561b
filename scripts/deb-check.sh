#!/usr/bin/env bash
# The .deb `make deb` built, installed and removed with dpkg on this host:
# every file it ships is in place and runs, and nothing is left after.
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$(ls -t target/debian/tenge-trace_*.deb | head -1)
fail() { echo "deb-check: $*" >&2; exit 1; }
dpkg-deb --info "$deb" >/dev/null || fail "$deb is not a package"
! dpkg -s tenge-trace >/dev/null 2>&1 || fail "tenge-trace is installed already: remove it first"

dpkg -i "$deb" >/dev/null
want=(
  /usr/bin/tenge-trace
  /usr/share/man/man1/tenge-trace-record.1.gz
  /usr/share/bash-completion/completions/tenge-trace
  /lib/systemd/system/tenge-trace-watch.service
  /usr/share/doc/tenge-trace/examples/prometheus/alerts.yml
  /usr/share/doc/tenge-trace/examples/prometheus/prometheus.yml
  /usr/share/doc/tenge-trace/examples/grafana/tenge-trace.json
  /usr/share/doc/tenge-trace/examples/container/Containerfile
  /usr/share/doc/tenge-trace/examples/kubernetes/daemonset.yaml
  /usr/share/doc/tenge-trace/schema/report.schema.json
  /usr/share/doc/tenge-trace/schema/watch-line.schema.json
)
for f in "${want[@]}"; do
  [ -e "$f" ] || { dpkg -r tenge-trace >/dev/null; fail "not installed: $f"; }
done
/usr/bin/tenge-trace --version | grep -q '^tenge-trace ' || { dpkg -r tenge-trace >/dev/null; fail "the installed binary does not run"; }
MANPATH=/usr/share/man man -w tenge-trace-record >/dev/null || { dpkg -r tenge-trace >/dev/null; fail "man tenge-trace-record not found"; }
files=$(dpkg -L tenge-trace | while read -r f; do [ -f "$f" ] && echo "$f"; done)
echo "deb-check: $(echo "$files" | wc -l) files installed from $deb"

dpkg -r tenge-trace >/dev/null
for f in $files; do
  [ ! -e "$f" ] || fail "left after removal: $f"
done
! dpkg -s tenge-trace >/dev/null 2>&1 || fail "still registered after removal"
echo "deb-check: removed, nothing left"
