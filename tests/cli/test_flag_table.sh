#!/usr/bin/env bash
# test_flag_table.sh - every flag of every command is used or refused, on
# every built-in model family (dense GPT, MoE, encoder-decoder, LLaVA).
#
# One row a flag (a flag may have more rows, one per value):
#   FLAG VALUE | USED-ON | EFFECT | REFUSED-ON
# VALUE is "-" for a flag without one. USED-ON is a command line (after
# `parity`) where the flag must change the result against the same line
# without it, as EFFECT says:
#   loss   the summary's losses (and their bits)
#   cfg    --print-config's output        lay   --print-layout's output
#   out    the output, timings left out
#   rc     the exit status (a flag the line needs, or one that refuses it)
#   file   VALUE (a path) exists after the run, not before
#   dump   the file $w/x.st the line writes
#   svg    the picture $w/g.svg the line draws
#   same   accepted (exit 0), the same bits by design (the reason follows)
# USED-ON "-": no model or layout uses that value (it is refused everywhere).
# REFUSED-ON: command lines, ";" between them, where the flag must be
# refused (exit 2, the work directory untouched) with a message naming it
# ("-": none). $M, $MOE, $T5, $LL, $G4 (below) name the model families.
# Every flag a --help text names must have a row (a new flag is decided
# here). Then every numeric value of the table, spelt with a leading blank, a '+'
# or in hex, must be refused naming its flag (numbers are decimal).
#
# Needs $PARITY (default build/parity). Runs in a private directory.
# Ends with "RESULT test_flag_table.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
PARITY=$(cd "$(dirname "$PARITY")" && pwd)/$(basename "$PARITY")
cd "$(dirname "$0")/../.."
. tests/refuse.sh parity-flags
P="$PARITY"
root=$PWD

# the families: a dense GPT, the same with experts, T5, LLaVA
M="train --model gpt-micro --steps 2 --quiet"
M3="train --model gpt-micro --steps 3 --quiet" # AdamW's first update is lr x sign(g): beta1, beta2 show at step 2
MOE="$M --num-experts 4"
T5="train --model t5-tiny --steps 2 --quiet"
LL="train --model llava-tiny --steps 2 --quiet"
G4="train --model gpt-tiny --steps 1 --quiet" # 8 layers, 8 heads: pp, vpp, 2-D tp
C="check --model gpt-micro --steps 1 --quiet"
GRID="svg grid --model gpt-micro --data-parallel-size 2 -o $w/g.svg"
# parity judge on rank files cut from the dump a.st (tests/judge/cut.py):
# exact ones (JR) and one element perturbed (JP: exit 1 unless a flag
# forgives it)
JR="judge --golden $w/a.st $w/rk/rank0.st $w/rk/rank1.st $w/rk/rank2.st $w/rk/rank3.st"
JP="judge --golden $w/a.st $w/pk/rank0.st $w/pk/rank1.st $w/pk/rank2.st $w/pk/rank3.st"
# the same exact rank files against the golden run from the model flags
JM="judge --model gpt-micro $w/rk/rank0.st $w/rk/rank1.st $w/rk/rank2.st $w/rk/rank3.st"

# inputs some rows read: another training text, a checkpoint, a trace,
# two dumps that differ, a patterns file, an offload directory
setup() {
  (cd "$w" && mkdir -p ref/data && cp "$root/ref/data/corpus.txt" ref/data/ && # any binary finds it
   rev "$root/ref/data/corpus.txt" >other.txt &&
   "$P" train --model gpt-micro --steps 1 --quiet --save ck >/dev/null &&
   "$P" train --model gpt-micro --steps 1 --quiet --data-parallel-size 2 --trace t.json >/dev/null &&
   "$P" train --model gpt-micro --steps 1 --quiet --dump a.st >/dev/null &&
   "$P" train --model gpt-micro --steps 1 --quiet --seed 7 --dump b.st >/dev/null &&
   "$P" train --model gpt-micro --steps 1 --quiet --seed 7 --export-weights w7 --names hf-gpt2 >/dev/null &&
   printf 'parallel = dict(pipeline=2)\n' >pp2.py && mkdir -p off rk pk &&
   /usr/bin/python3 "$root/tests/judge/cut.py" a.st rk &&
   /usr/bin/python3 "$root/tests/judge/cut.py" a.st pk perturb:3:step0.grad.layers.1.mlp.dense_h_to_4h.weight:5:1.001 &&
   for d in rk pk; do for r in 0 1 2 3; do mv $d/rank$r.safetensors $d/rank$r.st; done; done)
}
setup || { echo "not ok  setup"; echo "RESULT test_flag_table.sh: 0 passed, 1 failed"; exit 1; }

rows() {
  cat <<'EOF'
--model t5-tiny | train --steps 1 --quiet | loss | -
--steps 1 | train --model gpt-micro --quiet | loss | -
--backend portable | $M | same: portable computes golden/'s bits; openblas is checked against them | -
--data $w/other.txt | $M | loss | -
--dump $w/d.st | $M | file | $M --print-config
--dump-steps 1 | $M --dump $w/x.st | dump | $M; $C --dump $w/x.st
--digest $w/d.txt | $M | file | $M --print-layout
--save $w/sv | $M | file | $C
--load $w/ck | $M | loss | $M --print-config
--export-weights $w/ex | $M --names nanogpt | file | $C --names nanogpt; $M --names nanogpt --print-config; $M
--names hf-gpt2 | $M --export-weights $w/ex | rc | $M; $M --export-weights $w/ex --num-experts 4
--threads 2 | $M | same: a contraction's blocks over threads, the same bits (pool.h) | $M --data-parallel-size 2; $C
--quiet - | train --model gpt-micro --steps 2 | out | -
--print-config - | $M | out | $M --dump $w/x.st
--print-layout - | $M | out | $M --print-config
--compare act | $C --data-parallel-size 2 | out | $M
--num-layers 1 | $M | loss | -
--hidden-size 32 | $M --num-attention-heads 4 | loss | -
--num-attention-heads 4 | $M | loss | -
--ffn-hidden-size 32 | $M | loss | -
--encoder-num-layers 1 | $T5 | loss | $M; $MOE
--encoder-num-layers 2 | $LL | same: llava-tiny's own count | $M
--encoder-seq-length 8 | $T5 | loss | $M
--seq-length 8 | $M | loss | -
--vocab-size 512 | $M | loss | -
--global-batch-size 2 | $M | loss | -
--micro-batch-size 1 | $M | cfg | -
--seed 7 | $M | loss | -
--untie-embeddings-and-output-weights - | $M | loss | $T5; $LL
--hidden-dropout 0.3 | $M | loss | -
--attention-dropout 0.3 | $M | loss | -
--lr 0.01 | $M | loss | -
--min-lr 0.0009 | $M3 --lr-warmup-iters 0 --lr-decay-iters 1 | loss | -
--lr-warmup-iters 0 | $M | loss | -
--lr-decay-iters 1 | $M3 --lr-warmup-iters 0 | loss | -
--adam-beta1 0.5 | $M3 | loss | -
--adam-beta2 0.5 | $M3 | loss | -
--adam-eps 0.1 | $M | loss | -
--weight-decay 0.9 | $M | loss | -
--clip-grad 0.01 | $M | loss | -
--optimizer adamw8bit | $M3 | loss | -
--optimizer-block 64 | $M3 --optimizer adamw8bit | loss | $M; $M --optimizer adam
--optimizer-block 256 | $M --optimizer adamw8bit | same: the default block, given | $M; $M --optimizer adam
--tile-tokens 8 | $M | cfg | -
--tile-features 16 | $M | cfg | -
--tile-ffn 32 | $M | cfg | -
--bf16 - | $M | loss | -
--fp16 - | $M | loss | -
--loss-scale 1024 | $M --fp16 | loss | $M; $M --bf16
--loss-scale 0 | $M --fp16 | same: 0 is dynamic scaling, the default | $M; $M --bf16
--initial-loss-scale 1024 | $M --fp16 | loss | $M; $M --fp16 --loss-scale 128
--initial-loss-scale 0 | - | - | $M --fp16
--min-loss-scale 2 | $M --fp16 | cfg | $M; $M --fp16 --loss-scale 128
--min-loss-scale 0 | - | - | $M --fp16
--loss-scale-window 1 | train --model gpt-micro --steps 5 --quiet --fp16 --initial-loss-scale 2097152 --hysteresis 1 | loss | $M; $M --fp16 --loss-scale 128
--loss-scale-window 0 | - | - | $M --fp16
--hysteresis 1 | $M3 --fp16 --initial-loss-scale 2097152 | loss | $M; $M --fp16 --loss-scale 128
--hysteresis 0 | - | - | $M --fp16
--num-experts 4 | $M | loss | $T5; $LL
--moe-router-topk 1 | $MOE | loss | $M; $T5
--moe-layer-freq 2 | $MOE | loss | $M
--moe-router-pre-softmax - | $MOE | loss | $M
--moe-aux-loss-coeff 0.1 | $MOE | loss | $M
--moe-z-loss-coeff 0.1 | $MOE | loss | $M
--moe-expert-capacity-factor 0.5 | $MOE | loss | $M
--moe-token-drop-policy position | $MOE --moe-expert-capacity-factor 0.5 | loss | $M; $MOE
--moe-router-dtype fp32 | $MOE --bf16 | loss | $M; $MOE; $T5
--moe-router-dtype fp64 | - | - | $MOE --bf16
--make-vocab-size-divisible-by 512 | $M | loss | -
--data-parallel-size 2 | $M | lay | -
--world-size 2 | $M | lay | -
--tensor-model-parallel-size 2 | $M | lay | -
--sequence-parallel - | $M --tensor-model-parallel-size 2 | lay | $M
--tensor-parallel-row-linears - | $M --tensor-model-parallel-size 2 | lay | $M
--tensor-parallel-mode 2d | $G4 --tensor-model-parallel-size 4 | lay | -
--tensor-parallel-depth 2 | $G4 --tensor-model-parallel-size 8 --tensor-parallel-mode 2.5d | rc | $G4 --tensor-model-parallel-size 8
--recompute-granularity full | $M | lay | -
--recompute-method block | $M --recompute-granularity full | lay | $M
--recompute-num-layers 2 | $M --recompute-granularity full | lay | $M; $M --recompute-granularity full --recompute-method block --pipeline-model-parallel-size 2; $M --recompute-granularity selective
--offload-optimizer cpu | $M --zero-stage 1 | lay | $M
--offload-path $w/off | $M --zero-stage 1 --offload-optimizer nvme --print-layout | rc | $M --zero-stage 1 --offload-optimizer cpu; $M
--zero-stage 1 | $M --data-parallel-size 2 | lay | -
--pipeline-model-parallel-size 2 | $M | lay | -
--pipeline-layer-split 3,5 | $G4 --pipeline-model-parallel-size 2 | lay | $G4
--pipeline-layer-split 8 | - | - | $G4; $G4 --pipeline-model-parallel-size 1
--encoder-pipeline-model-parallel-size 1 | $T5 | lay | $M; $MOE
--encoder-pipeline-model-parallel-size 0 | $T5 | same: the encoder shares the decoder's stages, the default | $M
--encoder-tensor-model-parallel-size 1 | $T5 --tensor-model-parallel-size 2 --encoder-pipeline-model-parallel-size 1 | lay | $M; $M --encoder-pipeline-model-parallel-size 1
--pipeline-schedule gpipe | $M --pipeline-model-parallel-size 2 | lay | $M
--virtual-pipeline-model-parallel-size 2 | $G4 --pipeline-model-parallel-size 2 --num-microbatches 2 | lay | $M
--num-layers-per-virtual-pipeline-stage 2 | $G4 --pipeline-model-parallel-size 2 --num-microbatches 2 | lay | $M
--num-microbatches 2 | $M | lay | -
--accum-degree 2 | $M | lay | -
--context-parallel-size 2 | $M | lay | -
--cp-comm-type a2a | $M --context-parallel-size 2 | lay | $M
--cp-comm-type p2p | $M --context-parallel-size 2 | same: the ring, the default | $M
--expert-model-parallel-size 2 | $MOE --data-parallel-size 2 | lay | $M --data-parallel-size 2
--expert-tensor-parallel-size 1 | $MOE --tensor-model-parallel-size 2 | lay | $M; $M --tensor-model-parallel-size 2; $T5 --tensor-model-parallel-size 2
--rank-order dp-tp-cp-ep-pp | $M --tensor-model-parallel-size 2 --data-parallel-size 2 | lay | -
--rank-list 1,0 | $M --data-parallel-size 2 | lay | -
--use-distributed-optimizer - | $M --data-parallel-size 2 | lay | $M --zero-stage 0
--overlap-grad-reduce - | $M --data-parallel-size 2 | lay | -
--overlap-param-gather - | $M --data-parallel-size 2 --zero-stage 1 | lay | $M --data-parallel-size 2
--bucket-cap-mb 0.001 | $M --data-parallel-size 2 | lay | -
--dtype bf16 | $M | loss | -
--grad-sync-dtype bf16 | $M | loss | -
--coll-algo ring | train --model gpt-micro --steps 1 --data-parallel-size 2 | out | -
--parallel-config $w/pp2.py | $M | lay | -
--optim model.optim.name=distributed_fused_adam | $M --data-parallel-size 2 | lay | -
--trace $w/tr.json | $M --data-parallel-size 2 | file | $M --print-layout
--step-through - | $M --data-parallel-size 2 | same: devices take turns, the same bits | $M --print-layout
--arena-mb 0.001 | $M --data-parallel-size 2 | rc | -
--test-broken tp-fp32-sums | $C --tensor-model-parallel-size 2 | rc | $C
--devices 4 | plan --model gpt-micro --device-memory-mb 1000 | rc | -
--device-memory-mb 0.5 | plan --model gpt-micro --devices 2 | rc | -
--top 1 | plan --model gpt-micro --devices 2 --device-memory-mb 1000 | out | -
--json - | plan --model gpt-micro --devices 2 --device-memory-mb 1000 | out | -
--device-tflops 1 | plan --model gpt-micro --devices 2 --device-memory-mb 1000 | out | -
--link-gbs 1 | plan --model gpt-micro --devices 2 --device-memory-mb 1000 | out | -
--model gpt-micro | plan --devices 2 --device-memory-mb 1000 | out | -
--logical - | svg schedule $w/t.json -o $w/g.svg | svg | -
--output $w/g.svg | svg collective all-reduce --ranks 4 | rc | -
--ranks 2 | svg collective all-reduce -o $w/g.svg | rc | -
--algo ring | svg collective all-reduce --ranks 4 -o $w/g.svg | svg | -
--model gpt-micro | svg grid --data-parallel-size 2 -o $w/g.svg | svg | -
--sequence-parallel - | svg grid --tensor-model-parallel-size 2 -o $w/g.svg | svg | -
--tensor-parallel-row-linears - | svg grid --tensor-model-parallel-size 2 -o $w/g.svg | svg | -
--recompute-granularity selective | - | - | $GRID
--offload-optimizer cpu | - | - | $GRID
--zero-stage 1 | - | - | $GRID
--overlap-grad-reduce - | - | - | $GRID
--bucket-cap-mb 1 | - | - | $GRID
--grad-sync-dtype bf16 | - | - | $GRID
--num-microbatches 2 | - | - | $GRID
--quiet - | diff $w/a.st $w/b.st | out | -
--max-rows 1 | diff $w/a.st $w/b.st | out | -
--golden $w/a.st | judge $w/rk/rank0.st $w/rk/rank1.st $w/rk/rank2.st $w/rk/rank3.st | rc | $M
--multiple 1000000 | $JP | rc | $M
--tolerance grad=1000000 | $JP | rc | $M
--tolerance-for 'step0.grad.*=1000000' | $JP | rc | $M
--mask 'step0.grad.layers.1.mlp.dense_h_to_4h.weight[32,5]=known rounding' | $JP | rc | $M
--envelope-runs 2 | $JM | out | $M
--envelope-runs-for 'step0.grad.*=2' | $JM | out | $M
--report $w/j.json | $JR | file | $M
--load $w/ck | $JM | rc | $JR
--weights $w/w7/model.safetensors | $JM | rc | $JR
--names nanogpt | $JM --weights $w/w7/model.safetensors | rc | $JR; $JM
EOF
}

# The line's output and status into $tmp/o and $rc (in $w, 60 s at most).
run() { (cd "$w" && timeout 60 "$P" "$@" >"$tmp/o" 2>&1); rc=$?; }
# What an effect compares of a run of the line.
observe() {
  local effect=$1; shift
  case $effect in
    loss) run "$@"; grep -oE 'loss [^|]*' "$tmp/o" | tail -1 ;;
    cfg)  run "$@" --print-config; cat "$tmp/o" ;;
    lay)  run "$@" --print-layout; cat "$tmp/o" ;;
    out)  run "$@"; sed -E 's/[0-9.]+ (ms|s)\b//g; s/total [0-9.]+ s//' "$tmp/o" ;;
    rc)   run "$@"; echo "exit $rc" ;;
    dump) rm -f "$w/x.st"; run "$@"; sha256sum <"$w/x.st" 2>/dev/null ;;
    svg)  rm -f "$w/g.svg"; run "$@"; sha256sum <"$w/g.svg" 2>/dev/null ;;
  esac
}

# used FLAG VALUE EFFECT LINE: the flag changes what EFFECT observes.
used() {
  local flag=$1 value=$2 effect=$3 line=$4 name
  local -a with base
  eval "base=($line)"
  with=("${base[@]}" "$flag")
  [ "$value" != - ] && with+=("$value")
  name="$flag${value:+ $value} used on: $line"
  name=${name//$w/\$w}
  case $effect in
    same*)
      run "${with[@]}"
      if [ "$rc" -eq 0 ]; then ok "$name (${effect#same: })"
      else fail "$name" "exit $rc, expected 0" "$(tail -3 "$tmp/o")"; fi
      return ;;
    file)
      rm -rf "$value"; run "${with[@]}"
      if [ "$rc" -eq 0 ] && [ -e "$value" ]; then ok "$name"
      else fail "$name" "exit $rc; $value written: $([ -e "$value" ] && echo yes || echo no)" "$(tail -3 "$tmp/o")"; fi
      rm -rf "$value"
      return ;;
  esac
  local a b
  observe "$effect" "${base[@]}" >"$tmp/b"; local rb=$rc
  observe "$effect" "${with[@]}" >"$tmp/a"; local ra=$rc
  a=$(cat "$tmp/a"); b=$(cat "$tmp/b")
  if [ "$effect" != rc ] && { [ "$rb" -ne "$ra" ] || [ "$ra" -eq 2 ]; }; then
    fail "$name" "exit $rb without the flag, $ra with it" "$(tail -3 "$tmp/o")"
  elif [ -z "$a" ] || [ "$a" = "$b" ]; then
    fail "$name" "the flag changes nothing in the $effect (accepted and ignored)" "${a:0:200}"
  else
    ok "$name ($effect differs)"
  fi
}

# refused FLAG VALUE LINE: exit 2 naming the flag (a layout message names
# it without its dashes), nothing written.
refused() {
  local flag=$1 value=$2 line=$3
  local -a with
  eval "with=($line)"
  with+=("$flag")
  [ "$value" != - ] && with+=("$value")
  local name="$flag${value:+ $value} refused on: $line"
  refuse "${name//$w/\$w}" "(^|[^a-z-])-?-?${flag#--}([^a-z-]|$)" -- "$P" "${with[@]}"
}

declare -a numeric # "FLAG VALUE LINE" of every numeric value used somewhere
n=0
while IFS='|' read -r fv line effect refused_on; do
  fv=$(echo $fv); line=$(echo $line); effect=$(echo $effect); refused_on=$(echo $refused_on)
  [ -z "$fv" ] && continue
  flag=${fv%% *}; value=${fv#* }; [ "$value" = "$fv" ] && value=-
  eval "value=$value"
  n=$((n + 1))
  if [ "$line" != - ] && [ "$effect" != - ]; then used "$flag" "$value" "$effect" "$line"; fi
  if [ "$refused_on" != - ]; then
    IFS=';' read -ra ctxs <<<"$refused_on"
    for c in "${ctxs[@]}"; do refused "$flag" "$value" "$(echo $c)"; done
  fi
  if [ "$line" != - ] && [[ $value =~ ^[0-9][0-9.,]*$ ]]; then numeric+=("$flag|$value|$line"); fi
done < <(rows)
[ "$n" -ge 120 ] && ok "the table has $n rows" || fail "the table has $n rows, expected >= 120"

# every flag a --help names has a row: a new flag is decided here
helps=$(for c in train check plan svg diff judge; do "$P" $c --help 2>&1; done)
missing=""
for f in $(grep -oE -- '--[a-z0-9][a-z0-9-]*' <<<"$helps" | sort -u); do
  [ "$f" = --help ] && continue
  rows | grep -qE -- "^$f( |$)" || missing="$missing $f"
done
[ -z "$missing" ] && ok "every flag the --help texts name has a row" ||
  fail "flags of the --help texts without a row:$missing"

# numbers have one spelling: a leading blank, a '+', hex, refused by name
for e in "${numeric[@]}"; do
  IFS='|' read -r flag value line <<<"$e"
  for spelt in " $value" "+$value" "0x$value"; do
    eval "args=($line)"
    refuse "$flag '$spelt' (${line%% --*})" "(^|[^a-z-])-?-?${flag#--}([^a-z-]|$)" -- "$P" "${args[@]}" "$flag" "$spelt"
  done
done

echo "RESULT test_flag_table.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
