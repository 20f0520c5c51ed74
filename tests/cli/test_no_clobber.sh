#!/usr/bin/env bash
# test_no_clobber.sh - inputs are never outputs.
#
# Every output of every command (train and check: --dump, --digest,
# --trace, --save's checkpoint file; svg: -o) named onto one of the
# command's inputs (--data, its default ref/data/corpus.txt, --model
# FILE.json, --parallel-config, the files of --load's directory, svg's
# TRACE.json), spelled as the same path, as ./x, through a symbolic link,
# a hard link or a detour through another directory, is refused before
# anything runs: exit 2, a message naming the output's flag and the
# input's flag and path, and every file of the work directory byte for
# byte as it was. --save into the directory --load reads is the one
# exception (ckpt.h: read whole, replaced only on success), and works.
# Ends with "RESULT test_no_clobber.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
PARITY=$(cd "$(dirname "$PARITY")" && pwd)/$(basename "$PARITY")
cd "$(dirname "$0")/../.."
root=$(pwd)
. tests/refuse.sh parity-noclobber # $tmp, $w, ok, fail, snapshot

P="$PARITY"
T="$P train --model gpt-micro --steps 1 --quiet"
C="$P check --model gpt-micro --steps 1 --quiet --tensor-model-parallel-size 2"

# no_clobber NAME PATTERN -- COMMAND...: run in $w; exit 2 (not 0, not
# any other failure), stderr matching PATTERN, $w exactly as it was.
no_clobber() {
  local name=$1 pat=$2
  shift 3
  local before; before=$(snapshot)
  (cd "$w" && exec timeout 30 "$@" >"$tmp/out" 2>"$tmp/err")
  local rc=$?
  local after; after=$(snapshot)
  if [ "$rc" -ne 2 ]; then fail "$name" "exit $rc, expected 2" "$(tail -3 "$tmp/err")"
  elif ! grep -qE -- "$pat" "$tmp/err"; then fail "$name" "message does not match /$pat/:" "$(cat "$tmp/err")"
  elif [ "$before" != "$after" ]; then
    fail "$name" "the work directory changed:" "$(diff <(echo "$before") <(echo "$after") | head -8)"
  else ok "$name  ($(head -1 "$tmp/err" | cut -c1-150))"; fi
}

# --- fixtures: the inputs to protect -----------------------------------------
cp "$root/ref/data/corpus.txt" "$w/data.txt"
mkdir -p "$w/ref/data" "$w/sub"
cp "$root/ref/data/corpus.txt" "$w/ref/data/corpus.txt" # the default --data, found in the working directory
(cd "$w" && $T --print-config >m.json && $T --save ck >/dev/null && cp "$root/tests/configs/patterns_rows.json" pc.json &&
 $P train --model gpt-micro --steps 1 --quiet --pipeline-model-parallel-size 2 --num-microbatches 2 \
   --trace T.json >/dev/null) 2>"$tmp/err" || fail "fixtures" "$(cat "$tmp/err")"
ln -s data.txt "$w/link-to-data"
ln "$w/data.txt" "$w/hard-to-data"
ln -s ../m.json "$w/sub/link-to-model"
mkdir "$w/save-link" && ln -s ../data.txt "$w/save-link/model.safetensors"

IN="which this command reads"
# --- train: each output onto each input ----------------------------------------
no_clobber "--dump onto --data" "--dump 'data\.txt' names the --data file 'data\.txt', $IN" -- \
  $T --data data.txt --dump data.txt
no_clobber "--dump ./x onto --data x" "--dump '\./data\.txt' names the --data file 'data\.txt'" -- \
  $T --data data.txt --dump ./data.txt
no_clobber "--dump x onto --data ./x" "--dump 'data\.txt' names the --data file '\./data\.txt'" -- \
  $T --data ./data.txt --dump data.txt
no_clobber "--dump through another directory onto --data" "--dump 'sub/\.\./data\.txt' names the --data file" -- \
  $T --data data.txt --dump sub/../data.txt
no_clobber "--dump onto a symbolic link to --data" "--dump 'link-to-data' names the --data file 'data\.txt'" -- \
  $T --data data.txt --dump link-to-data
no_clobber "--dump onto a hard link to --data" "--dump 'hard-to-data' names the --data file 'data\.txt'" -- \
  $T --data data.txt --dump hard-to-data
no_clobber "--data a symbolic link, --dump its target" "--dump 'data\.txt' names the --data file 'link-to-data'" -- \
  $T --data link-to-data --dump data.txt
no_clobber "--dump onto the default --data" "--dump 'ref/data/corpus\.txt' names the --data \(default\) file 'ref/data/corpus\.txt'" -- \
  $T --dump ref/data/corpus.txt
no_clobber "--digest onto --model FILE.json" "--digest 'm\.json' names the --model file 'm\.json', $IN" -- \
  $P train --model m.json --steps 1 --quiet --digest m.json
no_clobber "--digest onto --config FILE.json (a link to it)" "--digest 'sub/link-to-model' names the --model file 'm\.json'" -- \
  $P train --config m.json --steps 1 --quiet --digest sub/link-to-model
no_clobber "--load D --digest D/model.safetensors" "--digest 'ck/model\.safetensors' names the --load file 'ck/model\.safetensors', $IN" -- \
  $T --load ck --digest ck/model.safetensors
no_clobber "--load D --dump D/model.safetensors" "--dump 'ck/model\.safetensors' names the --load file 'ck/model\.safetensors'" -- \
  $T --load ck --dump ck/model.safetensors
no_clobber "--load D/ --dump D/./model.safetensors" "--dump 'ck/\./model\.safetensors' names the --load file 'ck/model\.safetensors'" -- \
  $T --load ck/ --dump ck/./model.safetensors
no_clobber "--load D --trace D/model.safetensors (a layout)" "--trace 'ck/model\.safetensors' names the --load file" -- \
  $T --load ck --pipeline-model-parallel-size 2 --num-microbatches 2 --trace ck/model.safetensors
no_clobber "--trace onto --parallel-config (given after)" "--trace 'pc\.json' names the --parallel-config file 'pc\.json', $IN" -- \
  $T --trace pc.json --parallel-config pc.json
no_clobber "--trace onto --parallel-config (given before)" "--trace '\./pc\.json' names the --parallel-config file 'pc\.json'" -- \
  $T --parallel-config pc.json --trace ./pc.json
no_clobber "--trace onto --data (a layout)" "--trace 'data\.txt' names the --data file 'data\.txt'" -- \
  $T --data data.txt --tensor-model-parallel-size 2 --trace data.txt
no_clobber "--save whose checkpoint file links to --data" "--save 'save-link/model\.safetensors' names the --data file 'data\.txt'" -- \
  $T --data data.txt --save save-link
no_clobber "one good output does not excuse a bad one" "--digest 'data\.txt' names the --data file" -- \
  $T --data data.txt --dump fresh.st --digest data.txt

# --- check: the same rule ---------------------------------------------------------
no_clobber "check --digest onto --data" "--digest 'data\.txt' names the --data file 'data\.txt'" -- \
  $C --data data.txt --digest data.txt
no_clobber "check --load D --dump D/model.safetensors" "--dump 'ck/model\.safetensors' names the --load file" -- \
  $C --load ck --dump ck/model.safetensors
no_clobber "check --dump onto --model FILE.json" "--dump 'm\.json' names the --model file 'm\.json'" -- \
  $P check --model m.json --steps 1 --quiet --tensor-model-parallel-size 2 --dump m.json

# --- svg: -o never its input ---------------------------------------------------------
no_clobber "svg schedule X -o X" "-o 'T\.json' names the TRACE\.json file 'T\.json', $IN" -- \
  $P svg schedule T.json -o T.json
no_clobber "svg schedule X -o ./X --logical" "-o '\./T\.json' names the TRACE\.json file 'T\.json'" -- \
  $P svg schedule T.json --logical -o ./T.json
no_clobber "svg grid --parallel-config X -o X" "-o 'pc\.json' names the --parallel-config file 'pc\.json'" -- \
  $P svg grid --model gpt-micro --parallel-config pc.json -o pc.json

# --- the exception: --save into the directory --load reads -----------------------------
before=$(sha256sum <"$w/ck/model.safetensors")
if (cd "$w" && $T --load ck --save ck >/dev/null 2>"$tmp/err") && [ "$(sha256sum <"$w/ck/model.safetensors")" != "$before" ] &&
   (cd "$w" && $T --load ck --dump-steps 2 --dump resumed.st >/dev/null 2>>"$tmp/err"); then
  ok "--load D --save D continues the checkpoint in place (step 1 -> 2, and it loads)"
else fail "--load D --save D" "$(cat "$tmp/err")"; fi

echo "RESULT test_no_clobber.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
