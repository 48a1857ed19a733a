#!/bin/sh
# install-chromium.sh installs Debian's chromium (the headless browser the
# dashboard's browser test drives) when it is missing. It needs root (or
# sudo) and the Debian package archive; it downloads no browser build.
set -eu
if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends chromium fonts-dejavu-core
command -v chromium >/dev/null 2>&1 || { echo "install-chromium.sh: chromium is still missing after apt-get install" >&2; exit 1; }
