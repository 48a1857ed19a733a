#!/bin/sh
# install-chromium.sh installs Debian's chromium (the headless browser the
# dashboard's browser test drives), libnss3-tools (certutil and pk12util)
# and openssl (the test makes a PKCS#12 file of a client certificate and
# puts it and the cluster CA in the browser's NSS database to open the
# dashboard over mutual TLS) when any is missing. It needs root (or sudo) and the Debian package
# archive; it downloads no browser build.
set -eu
if command -v chromium >/dev/null 2>&1 && command -v certutil >/dev/null 2>&1 && command -v pk12util >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1; then
	exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends chromium fonts-dejavu-core libnss3-tools openssl
for c in chromium certutil pk12util openssl; do
	command -v "$c" >/dev/null 2>&1 || { echo "install-chromium.sh: $c is still missing after apt-get install" >&2; exit 1; }
done
