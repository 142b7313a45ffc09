#!/usr/bin/env bash
# test/gpu/fetch-deps.sh: download the Debian packages of cJSON into .deps/
# (ignored by git) for a GPU machine that lacks them and cannot reach a
# package archive; test/gpu/check.sh unpacks them there.  Carry .deps along.
set -eu
cd "$(dirname "$0")/../.."
mkdir -p .deps
cd .deps
apt-get download libcjson1 libcjson-dev
ls -l
