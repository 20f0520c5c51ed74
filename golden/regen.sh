#!/usr/bin/env bash
# regen.sh - rewrite golden/ from portable-backend runs (make golden).
#
# For each "<model> <steps>" line of golden/manifest.txt:
#   golden/<model>.sha256       digests of every dumped tensor
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
grep -v '^#' "$here/manifest.txt" | while read -r model steps; do
  [ -n "$model" ] || continue
  args=(train --model "$model" --steps "$steps" --backend portable --quiet
        --digest "$here/$model.sha256")
  if [ "$model" = gpt-micro ]; then args+=(--dump "$here/$model.safetensors"); fi
  echo "golden: parity ${args[*]}"
  "$parity" "${args[@]}"
done
echo "golden: done; $(cat "$here"/*.sha256 | wc -l) tensor digests"
