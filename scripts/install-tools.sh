#!/usr/bin/env bash
# Installs the Debian packages raftps' build and tests use, when missing.
set -euo pipefail
need=()
command -v protoc >/dev/null || need+=(protobuf-compiler)
if [ "${1:-}" != protoc ]; then
  command -v ip >/dev/null || need+=(iproute2)
  command -v nft >/dev/null || need+=(nftables)
  command -v stress-ng >/dev/null || need+=(stress-ng)
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-tools: need root to install ${need[*]}" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
