#!/usr/bin/env bash
# test_bad_input.sh - nothing lost, nothing hangs, nothing misreported.
#
# Every case runs the `parity` program on bad input in a private work
# directory and requires: a non-zero exit that is not a signal, no hang
# (each run has a time limit), a message naming the file, flag or field,
# and a work directory exactly as it was (no partial or temporary file,
# every pre-existing file byte-identical, device nodes and FIFOs still
# there). A full disk is simulated with a file-size limit (ulimit -f),
# and device nodes are private ones made in the temporary directory:
# the test never touches a real device.
# Ends with "RESULT test_bad_input.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
PARITY=$(cd "$(dirname "$PARITY")" && pwd)/$(basename "$PARITY")
cd "$(dirname "$0")/../.."
root=$(pwd)
. tests/refuse.sh parity-bad

P="$PARITY"
T="$P train --model gpt-micro --steps 1 --quiet"
T2="$P train --model gpt-micro --quiet" # $T for another --steps (a flag given twice is refused)

# --- fixtures: a good dump and digest list to protect, private nodes -------
if ! $T --dump "$w/good.st" --digest "$w/good.sha256" >/dev/null 2>"$tmp/err"; then
  fail "fixture: a good dump" "$(cat "$tmp/err")"
fi
mkfifo "$w/fifo"
mknod "$w/full" c 1 7 2>/dev/null || mkfifo "$w/full" # /dev/full's numbers; a FIFO if mknod is refused
ln -s full "$w/link-to-node"
ln -s good.st "$w/link-to-good"
mkdir "$w/dir"
printf 'text' >"$w/plain"
printf '{"base": "gpt-micro", "lr": 1e-300}' >"$w/tiny-lr.json"
printf '{"base": "gpt-micro", "lr": 1e39}' >"$w/huge-lr.json"
printf '{"base": "gpt-micro", "adam": ' >"$w/trunc.json"
head -c 100 "$w/good.st" >"$w/trunc.st" 2>/dev/null

# --- outputs: never a device node, never a partial file, never lose the old one
refuse "--dump onto a device node is refused and the node stays" "not a regular file|character device|FIFO" -- $T --dump "$w/full"
refuse "--digest onto a device node" "character device|FIFO" -- $T --digest "$w/full"
refuse "--dump through a symlink to a device node" "links to .*(character device|FIFO)" -- $T --dump "$w/link-to-node"
refuse "--dump onto a FIFO" "FIFO" -- $T --dump "$w/fifo"
refuse "--dump onto a directory" "directory" -- $T --dump "$w/dir"
refuse "--dump into a missing directory" "directory '$w/nodir' does not exist" -- $T --dump "$w/nodir/x.st"
refuse "--dump under a regular file" "plain/x.st.*Not a directory" -- $T --dump "$w/plain/x.st"
refuse "--dump with an empty name" "empty file name" -- $T --dump ""
refuse "--dump naming a directory with a trailing slash" "names a directory" -- $T --dump "$w/dir/"
refuse "a full disk keeps the previous dump intact" "--dump|safetensors file.*(File too large|write failed)" 16 -- $T --dump "$w/good.st"
refuse "a full disk through a symlink keeps the linked dump" "write failed" 16 -- $T --dump "$w/link-to-good"
refuse "a full disk leaves no new dump" "write failed" 16 -- $T --dump "$w/new.st"
refuse "a full disk keeps the previous digest list" "digest file.*write failed" 1 -- $T --digest "$w/good.sha256"
refuse "a full disk leaves no new digest list" "digest file.*write failed" 1 -- $T --digest "$w/new.sha256"
refuse "a failed run (missing data) creates no dump" "missing.txt" -- $T --dump "$w/new.st" --data "$w/missing.txt"
refuse "a failed run (bad config) creates no digest list" "num-layers" -- $T --digest "$w/new.sha256" --num-layers 0
refuse "--dump and --digest naming one file" "same file" -- $T --dump "$w/x" --digest "$w/x"
refuse "--dump and --digest naming one file two ways" "same file" -- $T --dump "$w/x" --digest "$w/./dir/../x"
refuse "--dump and --digest, one through a symlink" "same file" -- $T --dump "$w/good.st" --digest "$w/link-to-good"
# --- issue 22: outputs alias nothing, are one transaction, and a run that
# goes non-finite writes nothing (fixtures: a trace and a checkpoint)
$T --data-parallel-size 2 --trace "$w/good.trace" --save "$w/ck" >/dev/null 2>"$tmp/err" ||
  fail "fixture: a trace and a checkpoint" "$(cat "$tmp/err")"
L="$T --data-parallel-size 2"
refuse "--trace and --dump naming one file" "--trace '.*' and --dump '.*' name the same file" -- $L --trace "$w/x" --dump "$w/x"
refuse "--trace and --digest naming one file" "--trace '.*' and --digest '.*' name the same file" -- $L --trace "$w/x" --digest "$w/./x"
refuse "--trace onto the checkpoint file of --save" "--trace '.*' is the checkpoint file of --save" -- $L --trace "$w/ck/model.safetensors" --save "$w/ck"
refuse "--trace inside the --save directory" "--trace '.*' is the checkpoint directory of --save '.*' or inside it" -- $L --trace "$w/ck/t.json" --save "$w/ck"
refuse "--dump naming the --save directory" "--dump '.*' is the checkpoint directory of --save" -- $T --dump "$w/new" --save "$w/new"
refuse "--dump and --trace, one a hard link of the other" "--trace '.*' and --dump '.*' name the same file" -- sh -c "ln '$w/good.trace' '$w/hard' && $L --trace '$w/good.trace' --dump '$w/hard'; rc=\$?; rm -f '$w/hard'; exit \$rc"
refuse "check --trace and --dump naming one file" "--trace '.*' and --dump '.*' name the same file" -- $P check --model gpt-micro --steps 1 --data-parallel-size 2 --trace "$w/x" --dump "$w/x"
refuse "a failed --dump keeps the trace it would have replaced" "--dump|safetensors file.*write failed" 16 -- $L --trace "$w/good.trace" --dump "$w/good.st"
refuse "a failed --save keeps the digest list it would have replaced" "--save.*write failed" 64 -- $T2 --steps 2 --digest "$w/good.sha256" --save "$w/ck"
refuse "a failed --save (layout) keeps the trace and digest list" "--save.*write failed" 64 -- $T2 --data-parallel-size 2 --steps 2 --trace "$w/good.trace" --digest "$w/good.sha256" --save "$w/ck"
refuse "a failed --save into a new directory leaves no directory" "--save.*write failed" 64 -- $T --save "$w/newck"
if [ -c "$w/full" ]; then
  refuse "a full stdout keeps the checkpoint it would have replaced" "standard output" -- sh -c "exec $T2 --steps 2 --save '$w/ck' > '$w/full'"
  refuse "a full stdout (layout) keeps the trace and dump" "standard output" -- sh -c "exec $T2 --data-parallel-size 2 --steps 2 --trace '$w/good.trace' --dump '$w/good.st' > '$w/full'"
  refuse "check with a full stdout keeps the dump" "standard output" -- sh -c "exec $P check --model gpt-micro --steps 1 --data-parallel-size 2 --dump '$w/good.st' > '$w/full'"
fi
NF="$P train --model gpt-micro --steps 3 --lr 1e38 --lr-warmup-iters 1 --quiet"
refuse "a non-finite loss stops the golden run and saves nothing" "step 1: loss is not finite" -- $NF --save "$w/ck" --digest "$w/good.sha256"
refuse "a non-finite loss stops dp 2 and saves nothing" "step 1: loss is not finite" -- $NF --data-parallel-size 2 --save "$w/ck" --dump "$w/good.st" --digest "$w/good.sha256"
refuse "a non-finite loss stops tp 2 and saves nothing" "step 1: loss is not finite" -- $NF --tensor-model-parallel-size 2 --save "$w/ck" --trace "$w/good.trace"
refuse "a non-finite loss stops pp 2 and saves nothing" "step 1: loss is not finite" -- $NF --pipeline-model-parallel-size 2 --save "$w/ck" --digest "$w/new.sha256"
refuse "a non-finite loss stops a ZeRO-3 cp 2 layout" "step 1: loss is not finite" -- $NF --data-parallel-size 2 --use-distributed-optimizer --zero-stage 3 --context-parallel-size 2 --save "$w/newck"
refuse "check says when both runs went non-finite (exit 1)" "both runs went non-finite" -- $P check --model gpt-micro --steps 3 --lr 1e38 --lr-warmup-iters 1 --data-parallel-size 2
if grep -q "not finite: both runs.*bit-exact" "$tmp/out"; then ok "check's table says the runs are bit-exact and non-finite"
else fail "check's table says the runs are bit-exact and non-finite" "$(cat "$tmp/out")"; fi
# (a full stdout: a private /dev/full node, ENOSPC; and a file-size limit,
# EFBIG. Not ulimit -f 0: TSan's runtime itself dies under it.)
if [ -c "$w/full" ]; then
  refuse "--print-config into a private /dev/full node" "standard output.*No space left" -- sh -c "exec $T --print-config > '$w/full'"
  refuse "train's step lines into a private /dev/full node" "standard output" -- sh -c "exec $P train --model gpt-micro --steps 2 > '$w/full'"
  refuse "diff's table into a private /dev/full node" "standard output" -- sh -c "exec $P diff '$w/good.st' '$w/good.st' > '$w/full'"
else
  fail "a private /dev/full node" "mknod c 1 7 was refused: the full-stdout cases need it"
fi
refuse "train's step lines beyond a 1 KB file-size limit" "standard output.*File too large" 1 -- $P train --model gpt-micro --steps 40
refuse "--print-config with --dump" "print-config" -- $T --print-config --dump "$w/x.st"
refuse "check --dump-steps" "dump-steps" -- $P check --model gpt-micro --steps 1 --dump-steps 0
refuse "--dump-steps without --dump" "--dump-steps: nothing is dumped" -- $T --dump-steps 0
refuse "check --dump onto a device node" "character device|FIFO" -- $P check --model gpt-micro --steps 1 --dump "$w/full"

# --- flags: a flag is never a value, every value in range, every flag used
refuse "--dump followed by a flag" "--dump needs a value, got the flag '--quiet'" -- $P train --model gpt-micro --steps 1 --dump --quiet
refuse "--digest followed by a flag" "--digest needs a value" -- $P train --model gpt-micro --digest --steps 1
refuse "--data followed by a flag" "--data needs a value" -- $P train --data --model gpt-micro
refuse "--model followed by a flag" "--model needs a value" -- $P train --model --quiet
refuse "--steps followed by a flag" "--steps needs a value" -- $P train --model gpt-micro --steps --quiet
refuse "--num-layers followed by a flag" "--num-layers needs a value" -- $P train --model gpt-micro --num-layers --quiet
refuse "--lr followed by a flag" "--lr needs a value" -- $P train --model gpt-micro --lr --quiet
refuse "--data-parallel-size followed by a flag" "--data-parallel-size needs a value" -- $P train --model gpt-micro --data-parallel-size --zero-stage 1
refuse "--coll-algo followed by a flag" "--coll-algo needs a value" -- $P check --model gpt-micro --coll-algo --quiet
refuse "--arena-mb followed by a flag" "--arena-mb needs a value" -- $P check --model gpt-micro --arena-mb --quiet
refuse "--rank-order followed by a flag" "--rank-order needs a value" -- $P train --model gpt-micro --rank-order --quiet
refuse "--bucket-cap-mb followed by a flag" "--bucket-cap-mb needs a value" -- $P train --model gpt-micro --bucket-cap-mb --quiet
refuse "--rank-order with an unknown dimension" "--rank-order.*'foo'.*unknown dimension" -- $T --rank-order foo
refuse "--rank-order with a repeated dimension" "--rank-order.*appears twice" -- $T --rank-order tp-dp-tp
refuse "--rank-order too long" "--rank-order" -- $T --rank-order tp-cp-ep-dp-pp-tp-cp-ep-dp-pp-tp
refuse "--rank-list followed by a flag" "--rank-list needs a value" -- $T --world-size 2 --rank-list --quiet
refuse "--rank-list of the wrong length" "--rank-list: 3 ranks for a world of 2 devices .expected a permutation of 0..1.; an entry is the world rank at a position of the rank order" -- $T --world-size 2 --rank-list 1,0,2
refuse "--rank-list naming a rank twice" "--rank-list: entries 0 and 1 both name rank 1 .expected a permutation of 0..1" -- $T --world-size 2 --rank-list 1,1
refuse "--rank-list beyond the world" "--rank-list: entry 1 is rank 5, beyond the 2 devices" -- $T --world-size 2 --rank-list 0,5
refuse "--rank-list not a list of ranks" "--rank-list: expected the world rank at each position of the rank order, such as 3,0,2,1, got '0;1'" -- $T --world-size 2 --rank-list "0;1"
refuse "--lr underflowing fp32" "--lr.*underflows fp32" -- $T --lr 1e-50
refuse "--adam-eps subnormal in fp32" "--adam-eps.*underflows fp32" -- $T --adam-eps 1e-40
refuse "--lr beyond fp32" "--lr.*beyond fp32" -- $T --lr 1e39
refuse "--lr beyond a double" "--lr.*beyond fp32" -- $T --lr 1e400
refuse "--lr that overflows the warm-up" "lr x warmup.*overflows fp32" -- $T --lr 3e38
refuse "--hidden-dropout nan" "--hidden-dropout.*not a finite" -- $T --hidden-dropout nan
refuse "--weight-decay inf" "--weight-decay.*not a finite" -- $T --weight-decay inf
refuse "--zero-stage beyond int64" "unknown ZeRO stage 99999999999999999999 " -- $T --zero-stage 99999999999999999999
refuse "--zero-stage 4" "unknown ZeRO stage 4" -- $T --zero-stage 4
refuse "--num-layers beyond int32" "--num-layers: '99999999999' is out of range" -- $T --num-layers 99999999999
refuse "--seed negative" "--seed: '-1' is out of range" -- $T --seed -1
refuse "--seed beyond 2^53" "--seed.*out of range" -- $T --seed 99999999999999999999
refuse "--steps 0" "--steps.*out of range" -- $P train --model gpt-micro --steps 0
refuse "--steps with trailing junk" "--steps: expected an integer" -- $P train --model gpt-micro --steps 3x
refuse "--data-parallel-size beyond int64" "--data-parallel-size.*out of range" -- $T --data-parallel-size 99999999999999999999
refuse "--arena-mb negative" "--arena-mb" -- $P check --model gpt-micro --arena-mb -5
refuse "--bucket-cap-mb zero" "--bucket-cap-mb" -- $T --data-parallel-size 2 --bucket-cap-mb 0
refuse "--lr-warmup-iters negative" "lr-warmup-iters" -- $T --lr-warmup-iters -1
refuse "--global-batch-size 0" "global_batch \(--global-batch-size\) = 0" -- $T --global-batch-size 0
refuse "--data-parallel-size not dividing the batch" "data-parallel-size: 3 does not divide" -- $T --data-parallel-size 3
refuse "--world-size not dividing into the degrees" "world-size" -- $T --world-size 3 --data-parallel-size 2
refuse "--accum-degree above the sequences per rank" "accum-degree: 9" -- $T --accum-degree 9
refuse "--micro-batch-size contradicting --accum-degree" "micro-batch-size: 1 contradicts" -- $T --accum-degree 2 --micro-batch-size 1
refuse "--dtype fp8" "--dtype: expected fp32, bf16 or fp16, got 'fp8'" -- $T --dtype fp8
refuse "--grad-sync-dtype fp64" "--grad-sync-dtype: expected fp32, bf16 or fp16, got 'fp64'" -- $T --grad-sync-dtype fp64
refuse "--overlap-param-gather at ZeRO-0" "overlap-param-gather" -- $T --data-parallel-size 2 --overlap-param-gather
refuse "an unknown flag" "unknown option '--frobnicate'" -- $T --frobnicate
refuse "diff --max-rows followed by a flag" "--max-rows" -- $P diff "$w/good.st" "$w/good.st" --max-rows --quiet
refuse "diff with one operand" "usage|two files" -- $P diff "$w/good.st"

# --- degrees that cannot work: what must divide what (tensor parallelism)
refuse "tp not dividing the heads (every linear row-parallel: equal pieces)" "tensor-model-parallel-size: 3 must divide the 8 attention heads" -- $P check --model gpt-tiny --steps 1 --tensor-model-parallel-size 3 --tensor-parallel-row-linears
refuse "tp beyond the heads" "16 is more than the 8 blocks of whole attention heads" -- $P check --model gpt-tiny --steps 1 --tensor-model-parallel-size 16
refuse "tp splitting a vocabulary tile" "embedding.word_embeddings.weight: 2 tiles of 128 along axis 0 cannot give each of tp=4 ranks a whole tile" -- $P check --model gpt-small --steps 1 --tensor-model-parallel-size 4
refuse "tp splitting an FFN tile" "dense_h_to_4h.weight: 2 tiles of 128 along axis 0 cannot give each of tp=4 ranks" -- $P check --model gpt-tiny --steps 1 --tensor-model-parallel-size 4 --tile-ffn 128
refuse "tp splitting a feature tile" "query_key_value.weight: 4 tiles of 48 along axis 0 cannot give each of tp=8 ranks" -- $P check --model gpt-tiny --steps 1 --tensor-model-parallel-size 8 --tile-features 16
refuse "sequence parallel splitting a token tile" "sequence-parallel: tensor-model-parallel-size 8 must divide the 4 token tiles" -- $P check --model gpt-tiny --steps 1 --tensor-model-parallel-size 8 --sequence-parallel --tile-tokens 8
refuse "sequence parallel without tp" "sequence-parallel: needs tensor-model-parallel-size > 1" -- $P check --model gpt-tiny --steps 1 --sequence-parallel
refuse "world size not a multiple of tp" "world-size: 6 is not divisible by tp" -- $P check --model gpt-tiny --steps 1 --world-size 6 --tensor-model-parallel-size 4
refuse "world size contradicting tp x dp" "world-size: 8 does not equal data-parallel-size 2" -- $P check --model gpt-tiny --steps 1 --world-size 8 --tensor-model-parallel-size 2 --data-parallel-size 2
# pipeline layouts (gpt-tiny: 8 layers, gpt-micro: 2)
refuse "more stages than layers" "pipeline-model-parallel-size: 3 stages for a model of 2 layers" -- $P check --model gpt-micro --steps 1 --pipeline-model-parallel-size 3
refuse "stages that do not divide the layers" "pipeline-model-parallel-size: 3 does not divide the 8 layers; give --pipeline-layer-split" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 3
refuse "a layer split that does not sum to the layers" "pipeline-layer-split: the stages' layers sum to 7, expected the model's 8" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 3 --pipeline-layer-split 3,2,2
refuse "a layer split with the wrong number of stages" "pipeline-layer-split: 2 entries for pipeline-model-parallel-size 3" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 3 --pipeline-layer-split 4,4
refuse "a layer split with a zero" "pipeline-layer-split: expected layers per stage such as 3,3,2 .each >= 1., got '4,0,4'" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 3 --pipeline-layer-split 4,0,4
refuse "m not a multiple of pp under interleaving" "num-microbatches: 3 is not a multiple of pipeline-model-parallel-size 2" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --num-microbatches 3
refuse "virtual stages that do not divide a stage's layers" "virtual-pipeline-model-parallel-size: 3 chunks do not divide stage 0's 4 layers" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 3 --num-microbatches 2
refuse "layers per virtual stage that do not divide a stage" "num-layers-per-virtual-pipeline-stage: 3 must cut every stage's layers" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3 --num-microbatches 2
refuse "interleaved without virtual stages" "pipeline-schedule: interleaved needs" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --pipeline-schedule interleaved --num-microbatches 2
refuse "virtual stages with 1F1B" "pipeline-schedule: 1f1b has one model chunk per stage" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --pipeline-schedule 1f1b --virtual-pipeline-model-parallel-size 2
refuse "an unknown schedule" "--pipeline-schedule: expected gpipe, 1f1b, interleaved, naive, zb-h1, zb-h2, zb-v or dualpipev, got 'zb'" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --pipeline-schedule zb
refuse "a world size that tp x pp x dp does not match" "world-size: 12 does not equal data-parallel-size 2 x tp\\*pp\\*cp 4" -- $P check --model gpt-tiny --steps 1 --world-size 12 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --data-parallel-size 2
refuse "a world size that tp x pp does not divide" "world-size: 6 is not divisible by tp\\*pp\\*cp = 4" -- $P check --model gpt-tiny --steps 1 --world-size 6 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
refuse "degrees whose product exceeds the devices parity runs" "world-size: tp 128 x pp 256 x cp 1 x dp 1 devices exceeds the 16384" -- $P check --model gpt-tiny --steps 1 --tensor-model-parallel-size 128 --pipeline-model-parallel-size 256
refuse "a layer split with spaces" "--pipeline-layer-split: expected layers per stage" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --pipeline-layer-split "3, 5"
refuse "--num-microbatches and --accum-degree" "--num-microbatches and --accum-degree are one setting" -- $P check --model gpt-tiny --steps 1 --num-microbatches 2 --accum-degree 3
refuse "virtual stages without a pipeline" "virtual-pipeline-model-parallel-size: virtual stages need pipeline-model-parallel-size >= 2" -- $P check --model gpt-tiny --steps 1 --virtual-pipeline-model-parallel-size 2
refuse "a rank order without pp" "rank-order: 'tp-dp' leaves out pp, whose size is 2" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --rank-order tp-dp
refuse "a pipeline negative control without a pipeline" "--test-broken pp-tied-embedding: needs pipeline-model-parallel-size > 1" -- $P check --model gpt-tiny --steps 1 --test-broken pp-tied-embedding
refuse "the mask-key control where it cannot fire" "--test-broken pp-mask-key: needs .*with one sequence per microbatch and one data-parallel rank" -- $P check --model gpt-micro --steps 1 --pipeline-model-parallel-size 2 --num-microbatches 4 --test-broken pp-mask-key
refuse "--num-microbatches beyond the batch names the flag" "num-microbatches: 25 microbatches need at least 25 sequences" -- $P check --model gpt-tiny --steps 1 --num-microbatches 25
# context parallelism (gpt-tiny: T 32 in 8 token tiles, 8 heads): the ring
# cuts 2cp chunks of whole tiles, Ulysses cp pieces and heads/tp heads
refuse "a ring whose 2cp chunks do not cut the token tiles" "context-parallel-size" -- $P check --model gpt-tiny --steps 1 --context-parallel-size 3
refuse "a ring of more chunks than token tiles" "context-parallel-size" -- $P check --model gpt-tiny --steps 1 --context-parallel-size 16 --cp-comm-type p2p
refuse "Ulysses over more ranks than a tp rank's heads" "context-parallel-size" -- $P check --model gpt-tiny --steps 1 --cp-comm-type a2a --context-parallel-size 4 --tensor-model-parallel-size 4
refuse "--cp-comm-type all_gather (not implemented)" "cp-comm-type" -- $P check --model gpt-tiny --steps 1 --context-parallel-size 2 --cp-comm-type all_gather
refuse "an unknown --cp-comm-type" "cp-comm-type" -- $P check --model gpt-tiny --steps 1 --context-parallel-size 2 --cp-comm-type bogus
refuse "--cp-comm-type followed by a flag" "cp-comm-type" -- $P check --model gpt-tiny --steps 1 --cp-comm-type --context-parallel-size 2
refuse "a world size that cp does not divide" "world-size" -- $P check --model gpt-tiny --steps 1 --world-size 6 --context-parallel-size 4
refuse "--trace into a missing directory" "--trace.*directory '$w/nodir' does not exist" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --trace "$w/nodir/t.json"

# --- resources: estimated before anything is allocated
refuse "a model twice the host's memory, refused up front" "needs an estimated .* GB.*available" -- env PARITY_MEM_AVAILABLE_MB=24000 $P train --hidden-size 1024 --num-attention-heads 128 --ffn-hidden-size 4096 --num-layers 168 --steps 1
refuse "a layout beyond the available memory" "available" -- env PARITY_MEM_AVAILABLE_MB=1 $P check --model gpt-tiny --data-parallel-size 8 --steps 1
refuse "--arena-mb below a device's estimate" "--arena-mb" -- $P check --model gpt-tiny --data-parallel-size 2 --arena-mb 0.5 --steps 1
refuse "--print-layout with --dump" "print-layout" -- $T --print-layout --dump "$w/x.st"
refuse "check --digest onto a FIFO" "FIFO" -- $P check --model gpt-micro --steps 1 --digest "$w/fifo"

# --- input files: checked before a byte is read, FIFOs never block
refuse "--model a FIFO with no writer" "model config '$w/fifo': not a regular file \(a FIFO\)" -- $P train --model "$w/fifo"
refuse "--data a FIFO with no writer" "data file '$w/fifo': not a regular file \(a FIFO\)" -- $P train --model gpt-micro --data "$w/fifo"
refuse "diff operand a FIFO with no writer" "'$w/fifo': not a regular file \(a FIFO\)" -- $P diff "$w/fifo" "$w/good.st"
refuse "diff second operand a FIFO" "'$w/fifo': not a regular file" -- $P diff "$w/good.st" "$w/fifo"
refuse "--data a device node" "data file.*character device|FIFO" -- $P train --model gpt-micro --data "$w/full"
refuse "--data a symlink to a device node" "data file.*(character device|FIFO)" -- $P train --model gpt-micro --data "$w/link-to-node"
refuse "--model a device node" "model config.*(character device|FIFO)" -- $P train --model "$w/full"
refuse "--model a directory" "not a regular file \(a directory\)" -- $P train --model "$w/dir"
refuse "diff of a directory" "a directory" -- $P diff "$w/dir" "$w/good.st"
refuse "diff of a truncated dump" "trunc.st" -- $P diff "$w/trunc.st" "$w/good.st"
refuse "config lr underflowing fp32" "field 'lr'.*underflows fp32" -- $P train --model "$w/tiny-lr.json" --steps 1
refuse "config lr beyond fp32" "field 'lr'.*beyond fp32" -- $P train --model "$w/huge-lr.json" --steps 1
refuse "config JSON cut short" "malformed JSON" -- $P train --model "$w/trunc.json"
refuse "check names its own command in a model error" "^parity check: model config" -- $P check --model "$w/missing.json"
refuse "check --compare with a word that is no class" "--compare: 'bogus' is not a class" -- $P check --model gpt-micro --compare act,bogus
refuse "train --compare (only check compares)" "--compare: only parity check" -- $T --compare act
refuse "check names its own command for an unknown option" "^parity check: unknown option" -- $P check --model gpt-micro --bogus

# --- sizes and counts: range-checked in 64 bits, naming the field ----------
# (4 + 12 x 357913942 tensors wraps an int to a small count: a crash;
# 178956971 wraps it negative: "out of memory for -2147483640 tensors")
for NL in 357913942 178956971; do
  printf '{"base": "gpt-micro", "layers": %s}' "$NL" >"$tmp/layers-$NL.json"
  refuse "--num-layers $NL (train)" "layers \(--num-layers\) = $NL: expected at most" -- $P train --model gpt-micro --steps 1 --num-layers $NL
  refuse "--num-layers $NL (check)" "layers \(--num-layers\) = $NL: expected at most" -- $P check --model gpt-micro --steps 1 --num-layers $NL
  refuse "--num-layers $NL (--print-layout)" "layers \(--num-layers\) = $NL: expected at most" -- $P train --model gpt-micro --num-layers $NL --print-layout
  refuse "config \"layers\": $NL (train)" "layers \(--num-layers\) = $NL: expected at most" -- $P train --model "$tmp/layers-$NL.json" --steps 1
  refuse "config \"layers\": $NL (check)" "layers \(--num-layers\) = $NL: expected at most" -- $P check --model "$tmp/layers-$NL.json" --steps 1
  refuse "config \"layers\": $NL (--print-layout)" "layers \(--num-layers\) = $NL: expected at most" -- $P train --model "$tmp/layers-$NL.json" --print-layout
done
refuse "tokens a step beyond 2^30" "global_batch \(--global-batch-size\) = 67108865 x seq_length" -- $P train --model gpt-micro --steps 1 --global-batch-size 67108865 --micro-batch-size 1
printf '{"mode": "hybrid", "sharding_size": 4096, "stage_cnt": 4096, "device_mapping": {"stage_0": {"shard_0": "/device:XLA_DTU:0"}}}' >"$tmp/world.json"
refuse "patterns file: sharding_size x stage_cnt beyond the devices, before the mapping is sized" "sharding_size 4096 x stage_cnt 4096 = 16777216 devices exceeds" -- $P train --model gpt-micro --parallel-config "$tmp/world.json" --print-layout
refuse "a 600 GB model: the memory estimate refuses it before anything is built" "host memory: the run needs an estimated" -- $T --num-layers 4096 --hidden-size 1024 --num-attention-heads 128 --ffn-hidden-size 1024

# --- checkpoints: the digest covers the metadata; the scalars agree --------
# ckedit SRC DST [--redigest] KEY=VALUE...: a copy of checkpoint SRC with
# metadata values replaced, the header keeping its length (padded with
# spaces; the config rewritten compactly when a value grows), so the data
# offsets stay; --redigest recomputes the format-2 SHA-256 (metadata keys
# and values, then the data) so that only the consistency checks remain.
ckedit() {
  mkdir -p "$2" && /usr/bin/python3 - "$@" <<'PY'
import hashlib, json, struct, sys
src, dst, args = sys.argv[1], sys.argv[2], sys.argv[3:]
b = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
m = h["__metadata__"]
redigest = "--redigest" in args
for a in args:
    if a != "--redigest":
        k, v = a.split("=", 1)
        m[k] = v
m["config"] = json.dumps(json.loads(m["config"]), separators=(",", ":"))
if redigest:
    d = hashlib.sha256()
    for k in ("format", "config", "step", "adam_t", "backend"):
        d.update(k.encode() + b"\0" + m[k].encode() + b"\0")
    d.update(b[8 + n:])
    m["sha256"] = d.hexdigest()
t = json.dumps(h, separators=(",", ":")).encode()
assert len(t) <= n, "header grew"
open(dst + "/model.safetensors", "wb").write(b[:8] + t + b" " * (n - len(t)) + b[8 + n:])
PY
}
# one bit of a digit, the header otherwise byte for byte
ckflip() {
  mkdir -p "$2" && /usr/bin/python3 - "$@" <<'PY'
import sys
src, dst, old, new = sys.argv[1:5]
b = open(src + "/model.safetensors", "rb").read()
assert b.count(old.encode()) == 1
open(dst + "/model.safetensors", "wb").write(b.replace(old.encode(), new.encode()))
PY
}
if $P train --model gpt-micro --steps 2 --save "$w/ck" --quiet >/dev/null 2>"$tmp/err"; then
  ckflip "$w/ck" "$w/ck-step3" '"step":"2"' '"step":"3"'
  ckflip "$w/ck" "$w/ck-adam0" '"adam_t":"2"' '"adam_t":"0"'
  ckedit "$w/ck" "$w/ck-adam-huge" adam_t=2147483646
  ckedit "$w/ck" "$w/ck-adam-huge-digest" --redigest adam_t=2147483646
  ckedit "$w/ck" "$w/ck-both-huge-digest" --redigest step=2147483646 adam_t=2147483646
  ckedit "$w/ck" "$w/ck-step3-digest" --redigest step=3
  ckedit "$w/ck" "$w/ck-adam1-digest" --redigest adam_t=1
  ckflip "$w/ck" "$w/ck-name" 'gpt-micro' 'gpt-micrn'
  ckedit "$w/ck" "$w/ck-backend" --redigest backend=gpu
  ckedit "$w/ck" "$w/ck-max" --redigest step=1073741824 adam_t=1073741824
  ckedit "$w/ck" "$w/ck-lr" --redigest
  LOAD="$T --load"
  refuse "--load: \"step\" 2 -> 3 (one bit)" "metadata \"adam_t\" = 2 differs from \"step\" = 3" -- $LOAD "$w/ck-step3"
  refuse "--load: \"adam_t\" 2 -> 0 (one bit)" "metadata \"adam_t\" = 0 differs from \"step\" = 2" -- $LOAD "$w/ck-adam0"
  refuse "--load: the config's \"name\" (which a run may change) flipped: only the digest sees it" "is corrupt: the SHA-256 of its metadata and tensors" -- $LOAD "$w/ck-name"
  refuse "--load: \"adam_t\" 2147483646 with step 2 is refused at once" "metadata \"adam_t\": expected an integer in \[0, 1073741824\], got '2147483646'" -- $LOAD "$w/ck-adam-huge"
  refuse "--load: \"adam_t\" 2147483646, re-digested, names the field" "metadata \"adam_t\": expected an integer in \[0, 1073741824\]" -- $LOAD "$w/ck-adam-huge-digest"
  refuse "--load: step = adam_t = 2147483646, re-digested, beyond the limit" "metadata \"step\": expected an integer in \[0, 1073741824\]" -- $LOAD "$w/ck-both-huge-digest"
  refuse "--load: \"step\" 3, re-digested, disagrees with adam_t" "metadata \"adam_t\" = 2 differs from \"step\" = 3" -- $LOAD "$w/ck-step3-digest"
  refuse "--load: \"adam_t\" 1, re-digested, disagrees with step" "metadata \"adam_t\" = 1 differs from \"step\" = 2" -- $LOAD "$w/ck-adam1-digest"
  refuse "--load: an unknown backend, re-digested" "metadata \"backend\"" -- $LOAD "$w/ck-backend"
  refuse "--load: layout run, \"step\" 2 -> 3" "metadata \"adam_t\" = 2 differs from \"step\" = 3" -- $LOAD "$w/ck-step3" --data-parallel-size 2
  refuse "--load: layout run, the config's \"name\" flipped" "is corrupt" -- $LOAD "$w/ck-name" --data-parallel-size 2
  /usr/bin/python3 - "$w/ck" "$w/ck-transposed" <<'PY'
import json, os, struct, sys
src, dst = sys.argv[1:3]
b = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = next(k for k, v in h.items() if k != "__metadata__" and len(v["shape"]) == 2 and v["shape"][0] != v["shape"][1])
h[name]["shape"].reverse()
t = json.dumps(h, separators=(",", ":")).encode()
os.makedirs(dst, exist_ok=True)
open(dst + "/model.safetensors", "wb").write(b[:8] + t + b" " * (n - len(t)) + b[8 + n:])
PY
  refuse "--load: a transposed tensor names both shapes" "expected F32 \[[0-9]+, [0-9]+\], got F32 \[[0-9]+, [0-9]+\]" -- $LOAD "$w/ck-transposed"
  refuse "--save past step 2^30 is refused before the run" "--save: the run would end at step 1073741825, beyond the 1073741824" -- $LOAD "$w/ck-max" --save "$w/ck-max"
  if (cd "$w" && timeout 30 $LOAD "$w/ck-max" >/dev/null 2>"$tmp/err"); then
    ok "--load: a consistent checkpoint at step 2^30 resumes at once (AdamW's bias correction stops early)"
  else
    fail "--load: a consistent checkpoint at step 2^30 resumes at once" "$(cat "$tmp/err")"
  fi
  if (cd "$w" && $LOAD "$w/ck-lr" >/dev/null 2>"$tmp/err"); then
    ok "--load: a re-digested copy with its config rewritten compactly still loads (the edits above change only their field)"
  else
    fail "--load: a re-digested copy with its config rewritten compactly still loads" "$(cat "$tmp/err")"
  fi
else
  fail "fixture: a checkpoint" "$(cat "$tmp/err")"
fi

# --- issue 22, part two: a flag given twice, a flag that cannot apply, a bad environment
refuse "--steps given twice" "^parity train: --steps given twice" -- $T --steps 3
refuse "check --pipeline-layer-split given twice" "^parity check: --pipeline-layer-split given twice" -- $P check --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 --pipeline-layer-split 1,1 --pipeline-layer-split 2,0
refuse "--load given twice" "--load given twice" -- $T --load "$w/ck" --load "$w/ck"
refuse "--save given twice" "--save given twice" -- $T --save "$w/a" --save "$w/b"
refuse "--trace given twice" "--trace given twice" -- $L --trace "$w/a.json" --trace "$w/b.json"
refuse "--lr given twice" "--lr given twice" -- $T --lr 1e-3 --lr 2e-3
refuse "--quiet given twice" "--quiet given twice" -- $T --quiet
refuse "a broken-variant control given twice" "--test-broken given twice" -- $L --test-broken fp32-sums --test-broken fp32-sums
refuse "--model and --config, one flag" "--model and --config are one flag" -- $T --config gpt-tiny

printf '%s' '{"mode": "sharding", "stage_cnt": 2, "sharding_size": 2, "device_mapping": {"stage_0": {"shard_0": 0, "shard_1": 2}, "stage_1": {"shard_0": 1, "shard_1": 3}}}' >"$tmp/pptp.json"
refuse "--rank-order (even the default) with a patterns mapping" "device_mapping: the layout also comes from --rank-order" -- $P check --model gpt-tiny --steps 1 --rank-order tp-cp-ep-dp-pp --parallel-config "$tmp/pptp.json"
refuse "--pipeline-schedule gpipe at pp 1" "pipeline-schedule: gpipe needs pipeline-model-parallel-size > 1" -- $P check --model gpt-micro --steps 1 --pipeline-schedule gpipe
refuse "--print-layout with --trace" "print-layout.*--trace writes no file" -- $T --print-layout --trace "$w/t.json"
refuse "--backend cuda with --print-layout" "--backend: expected openblas or portable, got 'cuda'" -- $T --backend cuda --print-layout
refuse "--backend cuda with --print-config" "--backend: expected openblas or portable, got 'cuda'" -- $T --backend cuda --print-config
refuse "--arena-mb below one byte" "--arena-mb: '1e-7' MB is less than one byte" -- $P check --model gpt-micro --steps 1 --arena-mb 1e-7
refuse "--cp-comm-type p2p at cp 1" "cp-comm-type: p2p .* needs context-parallel-size > 1" -- $P check --model gpt-micro --steps 1 --cp-comm-type p2p
refuse "--test-broken tp-fp32-sums at tp 1" "--test-broken tp-fp32-sums: needs tensor-model-parallel-size > 1" -- $P check --model gpt-micro --steps 1 --test-broken tp-fp32-sums
refuse "--test-broken tp-vocab-padding at tp 1" "--test-broken tp-vocab-padding: needs tensor-model-parallel-size > 1" -- $P check --model gpt-micro --steps 1 --test-broken tp-vocab-padding
refuse "--test-broken tp-vocab-padding where nothing is padded" "--test-broken tp-vocab-padding: needs .*that of 256 is already a multiple of 128 x tp = 256" -- $P check --model gpt-micro --steps 1 --tensor-model-parallel-size 2 --test-broken tp-vocab-padding
refuse "--test-broken fp32-sums at dp 1" "--test-broken fp32-sums: needs data-parallel-size > 1" -- $P check --model gpt-micro --steps 1 --test-broken fp32-sums
refuse "train --test-broken replica:1 without a dump" "--test-broken replica:1: .*give --dump or --digest" -- $L --test-broken replica:1
refuse "--world-size 3 names the world size" "world-size: 3 devices / tp\*pp\*cp 1 = data-parallel-size 3, which does not divide" -- $T --world-size 3

refuse "PARITY_MEM_AVAILABLE_MB=abc" "PARITY_MEM_AVAILABLE_MB='abc' is not valid: expected a number of MB from 1" -- env PARITY_MEM_AVAILABLE_MB=abc $T
refuse "PARITY_MEM_AVAILABLE_MB=0 (no check)" "PARITY_MEM_AVAILABLE_MB='0' is not valid" -- env PARITY_MEM_AVAILABLE_MB=0 $P train --hidden-size 1024 --num-attention-heads 128 --ffn-hidden-size 4096 --num-layers 168 --print-layout
refuse "PARITY_MEM_AVAILABLE_MB=1e300" "PARITY_MEM_AVAILABLE_MB='1e300' is not valid" -- env PARITY_MEM_AVAILABLE_MB=1e300 $T
refuse "PARITY_COLL_WHOLE_BYTES=abc" "^parity check: PARITY_COLL_WHOLE_BYTES='abc' is not valid: expected an integer from 0 to" -- env PARITY_COLL_WHOLE_BYTES=abc $P check --model gpt-micro --steps 1 --data-parallel-size 2
refuse "PARITY_COLL_SPIN_US=1e300" "PARITY_COLL_SPIN_US='1e300' is not valid: expected a number from 0 to" -- env PARITY_COLL_SPIN_US=1e300 $P check --model gpt-micro --steps 1 --data-parallel-size 2
refuse "PARITY_COLL_YIELD_US=-1" "PARITY_COLL_YIELD_US='-1' is not valid" -- env PARITY_COLL_YIELD_US=-1 $P check --model gpt-micro --steps 1 --data-parallel-size 2
refuse "PARITY_COLL_ALGO=tree, even with --print-layout" "PARITY_COLL_ALGO='tree'" -- env PARITY_COLL_ALGO=tree $T --print-layout
refuse "PARITY_BACKEND=cuda, even with --print-config" "PARITY_BACKEND='cuda' is not valid" -- env PARITY_BACKEND=cuda $T --print-config
refuse "PARITY_PIN=yes" "PARITY_PIN='yes' is not valid: expected 0 or 1" -- env PARITY_PIN=yes $T

refuse "--arena-mb 0.01 names the device" "device memory: the largest of the 2 devices needs an estimated" -- $P check --model gpt-micro --steps 1 --data-parallel-size 2 --arena-mb 0.01
refuse "--arena-mb 0.01 on one device names it" "device memory: device 0 \(the only one\) needs" -- $P check --model gpt-micro --steps 1 --arena-mb 0.01

# --- what must still work ---------------------------------------------------
if (cd "$w" && $T --dump "$w/link-to-good" >/dev/null 2>"$tmp/err") && [ -L "$w/link-to-good" ] \
   && "$P" diff --quiet "$w/good.st" "$w/link-to-good" >/dev/null; then
  ok "--dump through a symlink replaces the linked file and keeps the link"
else
  fail "--dump through a symlink replaces the linked file and keeps the link" "$(cat "$tmp/err")"
fi
$P check --model gpt-micro --steps 2 --data-parallel-size 2 --dump "$tmp/layout.st" >/dev/null 2>"$tmp/err"
$T2 --steps 2 --dump "$tmp/golden2.st" >/dev/null 2>&1
if [ -s "$tmp/layout.st" ] && "$P" diff --quiet "$tmp/layout.st" "$tmp/golden2.st" >/dev/null; then
  ok "check --dump writes the layout's reassembled tensors (bit-exact with the golden dump)"
else
  fail "check --dump writes the layout's reassembled tensors (bit-exact with the golden dump)" "$(cat "$tmp/err")"
fi
chmod 0640 "$w/good.st"
if $T --dump "$w/good.st" >/dev/null 2>"$tmp/err" && [ "$(stat -c %a "$w/good.st")" = 640 ] \
   && [ -z "$(find "$w" -name '.*tmp*')" ]; then
  ok "a replaced dump keeps its permissions and no temporary file remains"
else
  fail "a replaced dump keeps its permissions and no temporary file remains" "$(ls -la "$w")" "$(cat "$tmp/err")"
fi
if [ -p "$w/fifo" ] && { [ -c "$w/full" ] || [ -p "$w/full" ]; }; then
  ok "the private FIFO and device node survived every case"
else
  fail "the private FIFO and device node survived every case" "$(ls -la "$w")"
fi

echo "RESULT test_bad_input.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
