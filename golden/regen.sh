#!/usr/bin/env bash
# regen.sh - rewrite golden/ from portable-backend runs (make golden).
#
# For each "<model> <steps> [<name> <flags>...]" line of golden/manifest.txt:
#   golden/<name>.sha256        digests of every dumped tensor (name: the model's)
# and for gpt-micro also the full dump golden/gpt-micro.safetensors, the
# small reference other backends can diff against tensor by tensor.
# The portable backend is strict IEEE in a fixed order (I5), so these
# files are the same on every machine; review a diff of them like code.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
parity=${PARITY:-$root/build/parity}
cd "$root"
[ -x "$parity" ] || { echo "regen.sh: $parity is not built (run make)" >&2; exit 2; }
grep -v '^#' "$here/manifest.txt" | while read -r model steps name flags; do
  [ -n "$model" ] || continue
  # shellcheck disable=SC2206 # the flags are words
  args=(train --model "$model" --steps "$steps" --backend portable --quiet
        --digest "$here/${name:-$model}.sha256" $flags)
  if [ -z "$name" ] && [ "$model" = gpt-micro ]; then args+=(--dump "$here/$model.safetensors"); fi
  echo "golden: parity ${args[*]}"
  "$parity" "${args[@]}"
done
echo "golden: done; $(cat "$here"/*.sha256 | wc -l) tensor digests"
