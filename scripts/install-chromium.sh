#!/bin/sh
# install-chromium.sh installs Debian's chromium (the headless browser the
# dashboard's browser test drives) and libnss3-tools (certutil and
# pk12util: the test puts the cluster CA and a client certificate in the
# browser's NSS database to open the dashboard over mutual TLS) when
# either is missing. It needs root (or sudo) and the Debian package
# archive; it downloads no browser build.
set -eu
if command -v chromium >/dev/null 2>&1 && command -v certutil >/dev/null 2>&1 && command -v pk12util >/dev/null 2>&1; then
	exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends chromium fonts-dejavu-core libnss3-tools
for c in chromium certutil pk12util; do
	command -v "$c" >/dev/null 2>&1 || { echo "install-chromium.sh: $c is still missing after apt-get install" >&2; exit 1; }
done
