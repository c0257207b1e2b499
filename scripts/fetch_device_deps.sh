#!/usr/bin/env bash
# Unpacks the Debian packages the host build uses (CLI11, nlohmann-json, yaml-cpp) into .deps/,
# so that a machine without network (the GPU machine) can build with
#   cmake -DCMAKE_PREFIX_PATH=$PWD/.deps/usr ...
# .deps/ is git-ignored; pass it along with the working tree (the device tool's `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .deps && mkdir -p .deps/debs
(cd .deps/debs && apt-get download libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libyaml-cpp0.7)
for deb in .deps/debs/*.deb; do dpkg -x "$deb" .deps; done
rm -rf .deps/debs
# The runtime library links by its soname; keep a copy beside the dev symlink.
echo "unpacked into $(pwd)/.deps/usr"
