#!/usr/bin/env bash
# The cudnn-frontend C++ headers (header-only; the CUDA backend's cuDNN SDPA, src/backend/cuda/attention_cudnn.cpp),
# from PyPI's nvidia-cudnn-frontend wheel, which ships them under include/. Only the headers are used; the
# package (a Python module with heavy dependencies) is never installed. The wheel is pinned by version and
# sha256 (the cp311 manylinux wheel, whatever Python runs this), the headers go to .deps/cudnn-frontend/include,
# where CMake looks first. Idempotent. Called by env/setup.sh when nvcc is present; needs .venv (for pip).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

package=nvidia-cudnn-frontend version=1.32.0
wheel="nvidia_cudnn_frontend-$version-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
want=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
dest="$root/.deps/cudnn-frontend"
stamp="$dest/.version"
[ "$(cat "$stamp" 2>/dev/null)" = "$version $want" ] && [ -f "$dest/include/cudnn_frontend.h" ] && exit 0

py="$root/.venv/bin/python"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sinklab/wheels"
if [ ! -f "$cache/$wheel" ] || [ "$(sha256sum "$cache/$wheel" | cut -d' ' -f1)" != "$want" ]; then
  echo "env/cudnn_frontend.sh: fetching $package==$version from PyPI (an 11 MB wheel; its include/ only)"
  "$py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 "$package==$version" -d "$cache"
fi
got=$(sha256sum "$cache/$wheel" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "env/cudnn_frontend.sh: error: $cache/$wheel has sha256 $got, this script pins $want" >&2
  exit 1
fi
rm -rf "$dest.tmp$$" && mkdir -p "$dest.tmp$$"
trap 'rm -rf "$dest.tmp$$"' EXIT
"$py" - "$cache/$wheel" "$dest.tmp$$" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])
PY
rm -rf "$dest" && mv "$dest.tmp$$" "$dest"
echo "$version $want" > "$stamp"
echo "env/cudnn_frontend.sh: cudnn-frontend $version headers in .deps/cudnn-frontend/include"
