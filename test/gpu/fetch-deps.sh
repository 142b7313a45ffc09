#!/usr/bin/env bash
# test/gpu/fetch-deps.sh: download the Debian packages of every library the
# engine's build links (test/gpu/deps.txt) into .deps/ (ignored by git), for a
# GPU machine that lacks them and cannot reach a package archive:
# test/gpu/check.sh unpacks what its machine is missing.  Carry .deps along.
# Run it where apt works (apt-get download needs no root).
set -eu
cd "$(dirname "$0")/../.."
packages=$(grep -v '^#' test/gpu/deps.txt | awk 'NF { for (i = 2; i <= NF; i++) print $i }')
mkdir -p .deps
cd .deps
# shellcheck disable=SC2086 # one word per package
apt-get download $packages >/dev/null
echo "fetched into .deps: $(ls ./*.deb | wc -l) packages, $(du -ch ./*.deb | tail -1 | cut -f1)"
