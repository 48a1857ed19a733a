#!/bin/sh
# vendor-web.sh re-vendors the dashboard's charting library (uPlot) from
# the npm registry into dashboard/ui/vendor/uplot: the minified IIFE build,
# its stylesheet and its licence, at the pinned version below. The build
# never fetches anything; run this only to change the version (then commit
# the files it writes). The upstream banner comment names a URL; it is
# replaced by one without (the dashboard serves no external URL, a test
# checks every embedded file).
set -eu
UPLOT_VERSION=${UPLOT_VERSION:-1.6.32}
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/dashboard/ui/vendor/uplot"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$UPLOT_VERSION" >/dev/null)
tgz="$tmp/uplot-$UPLOT_VERSION.tgz"
tar -xzf "$tgz" -C "$tmp"
mkdir -p "$dest"
{
	printf '/*! uPlot v%s (c) Leon Sorokin, MIT licence: see LICENSE beside this file */\n' "$UPLOT_VERSION"
	sed '1{/^\/\*!.*\*\/$/d}' "$tmp/package/dist/uPlot.iife.min.js"
} >"$dest/uPlot.iife.min.js"
cp "$tmp/package/dist/uPlot.min.css" "$dest/uPlot.min.css"
cp "$tmp/package/LICENSE" "$dest/LICENSE"
{
	echo "uplot $UPLOT_VERSION"
	echo "npm-tarball-sha256 $(sha256sum "$tgz" | cut -d' ' -f1)"
	echo "files uPlot.iife.min.js (banner comment replaced), uPlot.min.css, LICENSE"
} >"$dest/VERSION"
echo "vendored uplot $UPLOT_VERSION into $dest"
