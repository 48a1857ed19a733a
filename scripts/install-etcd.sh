#!/usr/bin/env bash
# Installs etcd (Debian's etcd-server) for the benchmark's etcd baseline,
# when it is missing. raftps-bench itself installs nothing.
set -euo pipefail
command -v etcd >/dev/null && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-etcd: etcd is not on PATH and installing etcd-server needs root" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server
