#!/usr/bin/env bash
# Installs the Debian packages the Python client (python/) runs and is
# tested on, when missing: gRPC's C core (libgrpc29), /usr/bin/python3 with grpcio, protobuf, numpy, cryptography,
# torch and pytest, pip, setuptools and wheel (`pip install ./python`
# offline, tests/test_package.py), and the gRPC Python protoc plugin (make
# generate-python).
# Nothing comes from a Python package index.
#
# Exits non-zero with a message naming what is missing if it cannot
# install them (no root, no apt), so `make test-python` fails instead of
# skipping.
set -euo pipefail
PY=/usr/bin/python3
need=()
[ -x "$PY" ] || need+=(python3)
check() { [ -x "$PY" ] && "$PY" -c "import $1" >/dev/null 2>&1; }
check grpc || need+=(python3-grpcio)
check google.protobuf || need+=(python3-protobuf)
check numpy || need+=(python3-numpy)
check cryptography || need+=(python3-cryptography)
check torch || need+=(python3-torch)
check pytest || need+=(python3-pytest)
check pip || need+=(python3-pip)
check setuptools || need+=(python3-setuptools)
check wheel || need+=(python3-wheel)
# The pserver data path's transport (raftps._grpccore): gRPC's C core 1.51,
# the release python3-grpcio is built from (grpcio links its own copy in).
has_libgrpc() { [ -x "$PY" ] && "$PY" -c "import ctypes; ctypes.CDLL('libgrpc.so.29')" >/dev/null 2>&1; }
has_libgrpc || need+=(libgrpc29)
if [ "${1:-}" = generate ] || [ "${1:-}" = all ]; then
  command -v grpc_python_plugin >/dev/null || need+=(protobuf-compiler-grpc)
  command -v protoc >/dev/null || need+=(protobuf-compiler)
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install-python: the Python tests need the Debian packages ${need[*]}" >&2
  echo "install-python: run as root on Debian (apt-get install -y ${need[*]})" >&2
  exit 1
fi
echo "install-python: installing ${need[*]}" >&2
# A private archive cache: other apt-get runs on a shared machine may clean
# the default one while dpkg unpacks from it.
cache=/var/tmp/raftps-apt
mkdir -p "$cache/partial"
apt=(apt-get -o DPkg::Lock::Timeout=600 -o Dir::Cache::archives="$cache/")
"${apt[@]}" update -qq >&2 || true
if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq --no-install-recommends "${need[@]}" >&2; then
  echo "install-python: apt-get install ${need[*]} failed" >&2
  exit 1
fi
if ! has_libgrpc; then
  echo "install-python: libgrpc.so.29 still missing after installing" >&2
  exit 1
fi
for m in grpc google.protobuf numpy torch pytest pip setuptools wheel; do
  if ! check "$m"; then
    echo "install-python: $PY still cannot import $m after installing" >&2
    exit 1
  fi
done
