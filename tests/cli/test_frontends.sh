#!/usr/bin/env bash
# test_frontends.sh - the configuration front ends (issue 12): the JSON
# "model parallel patterns" file and Colossal-AI's parallel dict
# (--parallel-config), NeMo's optimizer options (--optim):
#  - example files run bit-exact against the golden run over 3 steps
#    (`parity check`): the seed-style patterns file (8 stages x 4 shards,
#    non-contiguous device ids, 32 devices), a hybrid file, one whose
#    device_mapping is a permutation that no rank order gives (with and
#    without data parallelism; Megatron's --rank-list the same way), a
#    Colossal file with pipeline + 1-D tensor, a NeMo option set;
#  - equivalent descriptions in every dialect and in Megatron flags print
#    the same resolved layout (--print-layout, byte for byte);
#  - bad configurations exit non-zero, unkilled, with a message naming
#    the key, leaving the work directory as it was (refuse.sh).
# Ends with "RESULT test_frontends.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
PARITY=$(cd "$(dirname "$PARITY")" && pwd)/$(basename "$PARITY")
cd "$(dirname "$0")/../.."
root=$(pwd)
. tests/refuse.sh parity-frontends
P="$PARITY"
cfgs=$root/tests/configs
C="$P check --model gpt-tiny --steps 3 --backend portable"

# --- bit-exact runs ---------------------------------------------------------
exact() { # NAME ARGS...
  local name=$1; shift
  if $C "$@" >"$tmp/out" 2>&1 && grep -q '| yes$' "$tmp/out"; then
    ok "$name: $(grep '| yes$' "$tmp/out" | sed 's/  */ /g')"
  else
    fail "$name" "$(tail -4 "$tmp/out")"
  fi
}
exact "the seed's patterns file as written (sharding, 8 stages x 4 shards, ids 0-3, 5-8, ...)" \
  --parallel-config "$cfgs/patterns_seed.json"
exact "a hybrid patterns file (2 stages x 2 shards, pipelined)" --parallel-config "$cfgs/patterns_hybrid.json"
exact "a hybrid patterns file with data parallelism inferred from --world-size 8" \
  --parallel-config "$cfgs/patterns_hybrid.json" --world-size 8 --zero-stage 1
exact "a hybrid patterns file with sharding_dim 0 (every linear row-parallel)" \
  --parallel-config "$cfgs/patterns_rows.json"
exact "a patterns file with a shuffled device_mapping (stage_0 on devices 3, 0; stage_1 on 2, 1)" \
  --parallel-config "$cfgs/patterns_shuffled.json"
exact "the shuffled mapping with data parallelism (--world-size 8, ZeRO-1: replica 1 on 7, 4; 6, 5)" \
  --parallel-config "$cfgs/patterns_shuffled.json" --world-size 8 --zero-stage 1
exact "Megatron flags with --rank-list over tp x dp x pp (8 devices, ZeRO-2)" \
  --tensor-model-parallel-size 2 --data-parallel-size 2 --pipeline-model-parallel-size 2 \
  --num-microbatches 2 --zero-stage 2 --rank-list 5,2,7,0,3,6,1,4
exact "a Colossal-AI file: pipeline=2, tensor=dict(size=2, mode='1d'), dp inferred (world 8)" \
  --parallel-config "$cfgs/colossal_pp_tp.py" --num-microbatches 4 --world-size 8
exact "a Colossal-AI file: pipeline=2, tensor=dict(size=2, mode='sequence') (the cp ring)" \
  --parallel-config "$cfgs/colossal_sequence.py" --num-microbatches 2
NEMO=(--optim model.optim.name=distributed_fused_adam --optim model.optim.overlap_grad_sync=true
      --optim model.optim.overlap_param_sync=true --optim model.optim.bucket_cap_mb=0.05
      --optim model.optim.dtype=fp32 --optim model.optim.grad_sync_dtype=float32
      --optim model.optim.contiguous_grad_buffer=true --optim model.optim.contiguous_param_buffer=true)
exact "NeMo's distributed_fused_adam options on dp=4 (ZeRO-2, overlapped, small buckets)" \
  --data-parallel-size 4 "${NEMO[@]}"

# --- one resolved view --------------------------------------------------------
L="$P train --model gpt-tiny --print-layout"
same() { # NAME FILE_A FILE_B
  if [ -s "$2" ] && cmp -s "$2" "$3"; then ok "$1"
  else fail "$1" "$(diff "$2" "$3" | head -6)"; fi
}
$L --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 4 >"$tmp/megatron.json" 2>&1
$L --parallel-config "$cfgs/patterns_hybrid.json" >"$tmp/patterns.json" 2>&1
same "patterns hybrid file = Megatron flags (--print-layout)" "$tmp/megatron.json" "$tmp/patterns.json"
$L --tensor-model-parallel-size 4 --pipeline-model-parallel-size 8 --pipeline-schedule naive \
   --num-microbatches 4 >"$tmp/megatron8.json" 2>&1
$L --parallel-config "$cfgs/patterns_seed.json" >"$tmp/seed.json" 2>&1
same "the seed's sharding file = Megatron flags with the naive schedule" "$tmp/megatron8.json" "$tmp/seed.json"
$L --parallel-config "$cfgs/colossal_pp_tp.py" --num-microbatches 4 >"$tmp/colossal.json" 2>&1
same "Colossal-AI file = patterns file = Megatron flags" "$tmp/patterns.json" "$tmp/colossal.json"
$L --context-parallel-size 2 --cp-comm-type p2p --pipeline-model-parallel-size 2 --num-microbatches 2 \
   >"$tmp/megatron_cp.json" 2>&1
$L --parallel-config "$cfgs/colossal_sequence.py" --num-microbatches 2 >"$tmp/colossal_seq.json" 2>&1
same "Colossal-AI mode='sequence' = Megatron's cp ring (--context-parallel-size 2 --cp-comm-type p2p)" \
  "$tmp/megatron_cp.json" "$tmp/colossal_seq.json"
$L --data-parallel-size 4 --zero-stage 2 --use-distributed-optimizer --overlap-grad-reduce \
   --overlap-param-gather --bucket-cap-mb 0.052428800000000004 >"$tmp/megatron_zero.json" 2>&1
$L --data-parallel-size 4 "${NEMO[@]}" >"$tmp/nemo.json" 2>&1
same "NeMo options = Megatron flags (ZeRO-2, overlap, buckets of 0.05 MiB)" "$tmp/megatron_zero.json" "$tmp/nemo.json"
$L --tensor-model-parallel-size 2 --tensor-parallel-row-linears --pipeline-model-parallel-size 2 \
   --num-microbatches 4 >"$tmp/megatron_rows.json" 2>&1
$L --parallel-config "$cfgs/patterns_rows.json" >"$tmp/rows.json" 2>&1
same "patterns sharding_dim 0 = --tensor-parallel-row-linears" "$tmp/megatron_rows.json" "$tmp/rows.json"
if cmp -s "$tmp/rows.json" "$tmp/patterns.json"; then fail "sharding_dim 0 and -1 must print different layouts"
else ok "sharding_dim 0 and -1 print different layouts (tp_linears)"; fi
$L --parallel-config "$cfgs/patterns_shuffled.json" >"$tmp/shuffled.json" 2>&1
if grep -q '"rank_list": \[3, 0, 2, 1\]' "$tmp/shuffled.json" &&
   grep -q '"rank": 0, "tp": 1, "pp": 0, "dp": 0' "$tmp/shuffled.json" &&
   grep -q '"rank": 1, "tp": 1, "pp": 1, "dp": 0' "$tmp/shuffled.json" &&
   grep -q '"rank": 2, "tp": 0, "pp": 1, "dp": 0' "$tmp/shuffled.json" &&
   grep -q '"rank": 3, "tp": 0, "pp": 0, "dp": 0' "$tmp/shuffled.json"; then
  ok "a shuffled mapping prints its rank list and the grid by world rank (device 0: stage_0.shard_1)"
else fail "the shuffled mapping's --print-layout" "$(grep -E 'rank_list|"rank"' "$tmp/shuffled.json")"; fi
$L --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 4 \
   --rank-list 3,0,2,1 >"$tmp/megatron_list.json" 2>&1
same "a shuffled patterns mapping = Megatron flags with --rank-list 3,0,2,1" "$tmp/megatron_list.json" "$tmp/shuffled.json"
$L --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 4 \
   --rank-list 0,1,2,3 >"$tmp/identity.json" 2>&1
same "--rank-list 0,1,2,3 places every rank where the order does: no list" "$tmp/megatron.json" "$tmp/identity.json"
if grep -q '"rank": 31, "tp": 3, "pp": 7, "dp": 0' "$tmp/seed.json"; then
  ok "the seed's device XLA_DTU:38 (stage_7.shard_3) is world rank 31"
else fail "the seed's last device" "$(grep '"rank": 31' "$tmp/seed.json")"; fi

# --- bad patterns files ---------------------------------------------------------
T="$P check --model gpt-tiny --steps 1"
pat() { # NAME PATTERN JSON [FLAGS...]
  local name=$1 pattern=$2 json=$3; shift 3
  printf '%s' "$json" >"$tmp/p.json"
  refuse "patterns: $name" "$pattern" -- $T --parallel-config "$tmp/p.json" "$@"
}
M2='"device_mapping": {"stage_0": {"shard_0": "/device:XLA_DTU:0", "shard_1": "/device:XLA_DTU:1"}, "stage_1": {"shard_0": "/device:XLA_DTU:2", "shard_1": "/device:XLA_DTU:3"}}'
H='"mode": "hybrid", "sharding_size": 2, "stage_cnt": 2'
# ids 0, 5, 2, 3: in id order 0, 2, 3, 5 are ranks 0-3, so stage_0 holds 0, 3 and stage_1 1, 2
printf '%s' "{$H, \"accum_degree\": 4, ${M2/XLA_DTU:1\"/XLA_DTU:5\"}}" >"$tmp/gaps.json"
$L --parallel-config "$tmp/gaps.json" >"$tmp/gaps_layout.json" 2>&1
$L --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 4 \
   --rank-list 0,3,1,2 >"$tmp/gaps_flags.json" 2>&1
same "a mapping that is no rank order, ids 0, 5, 2, 3 = --rank-list 0,3,1,2" "$tmp/gaps_flags.json" "$tmp/gaps_layout.json"
pat "truncated JSON" "malformed JSON: line 1" '{"mode": "hybrid", '
pat "not an object" "expected a JSON object" '[1, 2]'
pat "an unknown key" "unknown key 'shards'" '{"mode": "hybrid", "shards": 2}'
pat "no mode" "mode: expected \"sharding\", \"pipeline\" or \"hybrid\", got nothing" '{"stage_cnt": 2}'
pat "an unknown mode" "mode: expected .*got data" '{"mode": "data"}'
pat "mode as a number" "mode: expected .*got number" '{"mode": 1}'
pat "sharding_size as a string" "sharding_size: expected an integer, got string" '{"mode": "sharding", "sharding_size": "2"}'
pat "sharding_size 0" "sharding_size: 0 is out of range \[1, 16384\]" '{"mode": "sharding", "sharding_size": 0}'
pat "sharding_size 2.5" "sharding_size: expected an integer, got a fraction" '{"mode": "sharding", "sharding_size": 2.5}'
pat "sharding_size 3, sharding_dim 0 (8 heads)" "sharding_size = tensor-model-parallel-size.*3 must divide the 8 attention heads" '{"mode": "sharding", "sharding_size": 3, "sharding_dim": 0}'
pat "sharding_dim 1" "sharding_dim: 1 is out of range \[-1, 0\]" '{"mode": "sharding", "sharding_size": 2, "sharding_dim": 1}'
pat "sharding_dim 0 with sequence parallelism" "sequence-parallel: not with every linear row-parallel" '{"mode": "sharding", "sharding_size": 2, "sharding_dim": 0}' --sequence-parallel
pat "stage_cnt -1" "stage_cnt: -1 is out of range" '{"mode": "pipeline", "stage_cnt": -1}'
pat "stage_cnt 3 (8 layers)" "stage_cnt = pipeline-model-parallel-size.*3 does not divide the 8 layers" '{"mode": "pipeline", "stage_cnt": 3}'
pat "stage_cnt 9 (8 layers)" "9 stages for a model of 8 layers" '{"mode": "pipeline", "stage_cnt": 9}'
pat "accum_degree 0" "accum_degree: 0 is out of range" '{"mode": "pipeline", "stage_cnt": 2, "accum_degree": 0}'
pat "accum_degree beyond the batch" "accum_degree = num-microbatches.*25 microbatches need at least 25 sequences" '{"mode": "pipeline", "stage_cnt": 2, "accum_degree": 25}'
pat "mode pipeline with shards" "sharding_size: 2, but mode \"pipeline\" shards nothing" '{"mode": "pipeline", "sharding_size": 2, "stage_cnt": 2}'
pat "device_mapping not an object" "device_mapping: expected an object of stage_0 .. stage_1, got array" "{$H, \"device_mapping\": []}"
pat "a stage missing" "device_mapping.stage_1 is missing .stage_cnt 2 needs stage_0 .. stage_1." "{$H, \"device_mapping\": {\"stage_0\": {\"shard_0\": \"/device:XLA_DTU:0\", \"shard_1\": \"/device:XLA_DTU:1\"}}}"
pat "an extra stage" "device_mapping.stage_2: unexpected key .stage_cnt 2: stage_0 .. stage_1." "{$H, ${M2%\}}, \"stage_2\": {}}}"
pat "a stage with a leading zero" "device_mapping.stage_01: unexpected key" "{$H, \"device_mapping\": {\"stage_0\": {}, \"stage_01\": {}}}"
pat "a shard missing" "device_mapping.stage_0.shard_1 is missing .sharding_size 2" "{$H, \"device_mapping\": {\"stage_0\": {\"shard_0\": \"/device:XLA_DTU:0\"}, \"stage_1\": {}}}"
pat "an extra shard" "device_mapping.stage_0.shard_2: unexpected key" "{$H, \"device_mapping\": {\"stage_0\": {\"shard_0\": \"/device:A:0\", \"shard_1\": \"/device:A:1\", \"shard_2\": \"/device:A:2\"}, \"stage_1\": {}}}"
pat "a device string without an id" "device_mapping.stage_0.shard_1: expected a device string such as" "{$H, ${M2/XLA_DTU:1/XLA_DTU:}}"
pat "a device string without /device:" "device_mapping.stage_0.shard_1: expected a device string" "{$H, ${M2/\/device:XLA_DTU:1/gpu:1}}"
pat "a negative device id" "device_mapping.stage_0.shard_1: expected a device string" "{$H, ${M2/XLA_DTU:1/XLA_DTU:-1}}"
pat "a device type with a space" "device_mapping.stage_0.shard_1: expected a device string" "{$H, ${M2/XLA_DTU:1/XLA DTU:1}}"
pat "a device as a number" "device_mapping.stage_0.shard_1: expected a device string .*got number" "{$H, ${M2/\"\/device:XLA_DTU:1\"/1}}"
pat "a duplicated device" "device_mapping.stage_0.shard_1 and stage_1.shard_0 both name device 1" "{$H, ${M2/XLA_DTU:2/XLA_DTU:1}}"
pat "mixed device types" "device_mapping.stage_1.shard_1: device type 'GPU', but stage_0.shard_0's is 'XLA_DTU'" "{$H, ${M2/XLA_DTU:3/GPU:3}}"
pat "a device id beyond the devices parity simulates" "device_mapping.stage_1.shard_1: device 20000 is beyond the 16384 devices" "{$H, ${M2/XLA_DTU:3/XLA_DTU:20000}}"
pat "a mode with a NUL inside" "mode: expected" '{"mode": "hybrid\u0000x", "stage_cnt": 2}'
pat "a device string with a NUL inside" "device_mapping.stage_1.shard_1: expected a device string" "{$H, ${M2/XLA_DTU:3/XLA_DTU:3\\u0000zz}}"
pat "sharding_dim 0 with sharding_size 1" "sharding_dim: 0 shards nothing" '{"mode": "pipeline", "stage_cnt": 2, "sharding_dim": 0}'
pat "the file and --tensor-parallel-row-linears" "sharding_dim: the layout also comes from --tensor-parallel-row-linears" "{$H, \"sharding_dim\": -1}" --tensor-parallel-row-linears
pat "the file's mapping and --rank-list" "device_mapping: the layout also comes from --rank-list" "{$H, $M2}" --rank-list 0,1,2,3
pat "the file and --tensor-model-parallel-size" "sharding_size: the layout also comes from --tensor-model-parallel-size; give one" "{$H}" --tensor-model-parallel-size 2
pat "the file and --rank-order" "device_mapping: the layout also comes from --rank-order" "{$H, $M2}" --rank-order pp-tp-dp
pat "sharding stages and --pipeline-schedule" "mode: the layout also comes from --pipeline-schedule" '{"mode": "sharding", "stage_cnt": 2}' --pipeline-schedule 1f1b
pat "a duplicated key" "malformed JSON|duplicate" '{"mode": "hybrid", "mode": "pipeline"}'
refuse "patterns: a missing file" "--parallel-config '$tmp/none.json': cannot open" -- $T --parallel-config "$tmp/none.json"
refuse "patterns: a directory" "--parallel-config '$w': not a regular file" -- $T --parallel-config "$w"
: >"$tmp/empty.json"
refuse "patterns: an empty file" "malformed JSON" -- $T --parallel-config "$tmp/empty.json"
refuse "--parallel-config twice" "--parallel-config:? given twice" -- $T --parallel-config a.json --parallel-config b.json

# --- bad Colossal-AI files --------------------------------------------------------
col() { # NAME PATTERN TEXT [FLAGS...]
  local name=$1 pattern=$2 text=$3; shift 3
  printf '%s\n' "$text" >"$tmp/c.py"
  refuse "colossal: $name" "$pattern" -- $T --parallel-config "$tmp/c.py" "$@"
}
col "tensor=4 without a mode" "parallel.tensor: .*mode" "parallel = dict(tensor=4)"
col "mode 2d with size 8" "parallel.tensor.*2d needs a square size, got 8" "parallel = dict(tensor=dict(size=8, mode='2d'))"
col "mode sequence and --context-parallel-size" "parallel.tensor.mode: 'sequence' is the cp ring.*give one" "parallel = dict(tensor=dict(size=2, mode='sequence'))" --context-parallel-size 2
col "mode 2.5d without depth" "parallel.tensor.depth" "parallel = dict(tensor=dict(size=8, mode='2.5d'))"
col "mode 3d with size 9" "parallel.tensor.*3d needs a cube" "parallel = dict(tensor=dict(size=9, mode='3d'))"
col "an unknown key" "parallel.zero" "parallel = dict(zero=2)"
col "a float size" "parallel.pipeline.*float" "parallel = dict(pipeline=2.0)"
col "a zero size" "parallel.pipeline" "parallel = dict(pipeline=0)"
col "unbalanced parentheses" "c.py:2: parallel: expected ',' or '.'" "parallel = dict(pipeline=2"
col "an unterminated string" "c.py:1" "parallel = dict(tensor=dict(size=2, mode='1d))"
col "no parallel" "parallel: not found" "BATCH_SIZE = 4"
col "parallel twice" "parallel" $'parallel = dict(pipeline=2)\nparallel = dict(pipeline=4)'
col "a function call" "c.py:1" "parallel = make(pipeline=2)"
col "__import__" "c.py:1" "parallel = __import__('os')"
col "a size 16 tensor (8 heads)" "parallel.tensor.size = tensor-model-parallel-size.*16 is more than the 8 blocks of whole attention heads" "parallel = dict(tensor=dict(size=16, mode='1d'))"
col "the file and --pipeline-model-parallel-size" "parallel.pipeline: the layout also comes from --pipeline-model-parallel-size" "parallel = dict(pipeline=2)" --pipeline-model-parallel-size 2

# --- bad NeMo options ------------------------------------------------------------
nemo() { # NAME PATTERN KV [FLAGS...]
  local name=$1 pattern=$2 kv=$3; shift 3
  refuse "nemo: $name" "$pattern" -- $T --optim "$kv" "$@"
}
nemo "an unknown key" "model.optim.foo" model.optim.foo=1
nemo "no =" "model.optim.name" model.optim.name
nemo "no prefix" "name" name=distributed_fused_adam
nemo "fp16 state against --dtype bf16" "model.optim.dtype=fp16 contradicts --dtype bf16" model.optim.dtype=fp16 --optim model.optim.name=distributed_fused_adam --dtype bf16
nemo "grad_sync_dtype against --grad-sync-dtype" "model.optim.grad_sync_dtype=fp32 contradicts --grad-sync-dtype bf16" model.optim.grad_sync_dtype=fp32 --optim model.optim.name=distributed_fused_adam --grad-sync-dtype bf16
nemo "bucket_cap_mb 0" "model.optim.bucket_cap_mb" model.optim.bucket_cap_mb=0 --optim model.optim.name=distributed_fused_adam
nemo "bucket_cap_mb nan" "model.optim.bucket_cap_mb" model.optim.bucket_cap_mb=nan --optim model.optim.name=distributed_fused_adam
nemo "a boolean 'yes'" "model.optim.overlap_grad_sync" model.optim.overlap_grad_sync=yes --optim model.optim.name=distributed_fused_adam
nemo "sgd" "model.optim.name: 'sgd' is not supported" model.optim.name=sgd
nemo "a non-contiguous gradient buffer" "model.optim.contiguous_grad_buffer" model.optim.contiguous_grad_buffer=false --optim model.optim.name=distributed_fused_adam
nemo "lr is parity's --lr" "model.optim.lr.*--lr" model.optim.lr=0.1
nemo "a key given twice" "model.optim.name" model.optim.name=adamw --optim model.optim.name=adamw
nemo "ZeRO-2 against --zero-stage 1" "model.optim.name=distributed_fused_adam .ZeRO-2. contradicts --zero-stage 1" model.optim.name=distributed_fused_adam --zero-stage 1

echo "RESULT test_frontends.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
