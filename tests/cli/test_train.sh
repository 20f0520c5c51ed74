#!/usr/bin/env bash
# test_train.sh - `parity train` from the outside: it trains, dumps, and
# refuses bad input with a non-zero exit and a message naming the field
# (never a crash: exit codes >= 128 mean a signal and count as failures).
# Ends with "RESULT test_train.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/parity-train-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

# expect_error NAME PATTERN ARGS...: non-zero exit (not a signal), stderr matching PATTERN
expect_error() {
  local name=$1 pat=$2; shift 2
  "$PARITY" train "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ "$rc" -eq 0 ]; then fail "$name" "exit 0, expected an error"; return; fi
  if [ "$rc" -ge 128 ]; then fail "$name" "killed by signal $((rc - 128))" "$(tail -3 "$tmp/err")"; return; fi
  if ! grep -qE -- "$pat" "$tmp/err"; then fail "$name" "message does not match /$pat/:" "$(cat "$tmp/err")"; return; fi
  ok "$name  ($(head -1 "$tmp/err"))"
}

# --- it trains ---
if "$PARITY" train --model gpt-micro --steps 3 >"$tmp/out" 2>&1 \
   && [ "$(grep -c '^step ' "$tmp/out")" -eq 3 ] && grep -q '^summary: model gpt-micro' "$tmp/out"; then
  ok "train gpt-micro: 3 step lines and a summary"
else
  fail "train gpt-micro: 3 step lines and a summary" "$(tail -5 "$tmp/out")"
fi

# --- bad input ---
expect_error "missing data file" "/nonexistent/text.txt" --model gpt-micro --data /nonexistent/text.txt
expect_error "a directory as the data file" "not a regular file" --model gpt-micro --data "$tmp"
expect_error "a directory as the model config" "not a regular file" --model "$tmp"
expect_error "missing model config file" "/nonexistent/model.json" --model /nonexistent/model.json
printf '{"base": "gpt-micro", "layers": 2,' >"$tmp/trunc.json"
expect_error "malformed config JSON" "malformed JSON" --model "$tmp/trunc.json"
printf '{"base": "gpt-micro", "hidden": "wide"}' >"$tmp/type.json"
expect_error "config field of the wrong type" "'hidden'" --model "$tmp/type.json"
printf '{"base": "gpt-micro", "hiddden": 16}' >"$tmp/key.json"
expect_error "unknown config field" "'hiddden'" --model "$tmp/key.json"
printf '{"vocab": 256, "seq_length": 16, "hidden": 16, "heads": 2, "layers": 1, "ffn": 64}' >"$tmp/partial.json"
expect_error "config file without tiles" "tiles.tokens" --model "$tmp/partial.json"
expect_error "token tile does not divide the sequence" "tiles.tokens.*seq_length" --model gpt-micro --tile-tokens 5
expect_error "feature tile does not divide hidden" "tiles.features.*hidden" --model gpt-tiny --tile-features 24
expect_error "feature tile splits a head" "tiles.features.*head" --model gpt-tiny --tile-features 4
expect_error "ffn tile does not divide ffn" "tiles.ffn" --model gpt-micro --tile-ffn 24
expect_error "vocabulary smaller than the byte range" "vocab.*256" --model gpt-micro --vocab-size 128
expect_error "heads do not divide hidden" "heads" --model gpt-micro --num-attention-heads 3
expect_error "micro batch does not divide the batch" "micro_batch" --model gpt-micro --micro-batch-size 3
expect_error "dropout out of range" "hidden-dropout" --model gpt-micro --hidden-dropout 1.5
expect_error "non-integer flag value" "--num-layers" --model gpt-micro --num-layers two
expect_error "unknown model name" "gpt-micro" --model gpt-enormous
expect_error "unknown option" "--frobnicate" --model gpt-micro --frobnicate
expect_error "dump step not run" "--dump-steps" --model gpt-micro --steps 2 --dump "$tmp/d.st" --dump-steps 5
expect_error "unwritable dump path" "/nonexistent/dir/x.safetensors" --model gpt-micro --steps 1 --dump /nonexistent/dir/x.safetensors
expect_error "unknown backend" "--backend" --model gpt-micro --backend cuda
printf 'tiny' >"$tmp/short.txt"
expect_error "data shorter than a sample" "short.txt" --model gpt-micro --data "$tmp/short.txt"

# --- dumps: names of the contract with tests/torch ---
if "$PARITY" train --model gpt-micro --steps 2 --dump "$tmp/run.safetensors" --quiet >"$tmp/out" 2>&1; then
  if /usr/bin/python3 - "$tmp/run.safetensors" >"$tmp/py" 2>&1 <<'PY'
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
h = json.loads(blob[8:8 + n])
meta = h.pop("__metadata__")
assert meta["format"] == "parity-dump-1", meta
cfg = json.loads(meta["config"])
for k in ("vocab", "seq_length", "hidden", "heads", "layers", "ffn", "tiles", "tied", "dropouts",
          "seed", "global_batch", "micro_batch", "lr", "min_lr", "warmup", "decay_steps",
          "beta1", "beta2", "eps", "weight_decay", "clip_grad", "ln_eps"):
    assert k in cfg, "config lacks " + k
B, T, C, V, L = cfg["global_batch"], cfg["seq_length"], cfg["hidden"], cfg["vocab"], cfg["layers"]
want = {"init.embedding.word_embeddings.weight": [V, C]}
for s in (0, 1):
    p = "step%d." % s
    want.update({p + "input_ids": [B, T], p + "labels": [B, T], p + "logits": [B, T, V],
                 p + "loss": [1], p + "lr": [1], p + "grad_norm": [1],
                 p + "act.embedding.output": [B, T, C], p + "act.final_layernorm.output": [B, T, C],
                 p + "mask.dropout.embedding": [B, T, C],
                 p + "mask.layers.1.attention_dropout": [B, cfg["heads"], T, T],
                 p + "grad.final_layernorm.bias": [C],
                 p + "param.embedding.word_embeddings.weight": [V, C]})
    for l in range(L):
        for a, w in (("input_layernorm.output", C), ("self_attention.query_key_value.output", 3 * C),
                     ("self_attention.core_attention.output", C), ("self_attention.dense.output", C),
                     ("post_attention_layernorm.output", C), ("mlp.dense_h_to_4h.output", cfg["ffn"]),
                     ("mlp.dense_4h_to_h.output", C), ("output", C)):
            want["%sact.layers.%d.%s" % (p, l, a)] = [B, T, w]
for k, shape in want.items():
    assert k in h, "missing " + k
    assert h[k]["shape"] == shape, "%s: shape %s, want %s" % (k, h[k]["shape"], shape)
print(len(h), "tensors ok")
PY
  then ok "dump has the contract's names and shapes ($(cat "$tmp/py"))"
  else fail "dump has the contract's names and shapes" "$(cat "$tmp/py")"; fi
else
  fail "dump written" "$(tail -3 "$tmp/out")"
fi

# --- the same bits whatever the microbatch count, and from a config file ---
"$PARITY" train --model gpt-micro --steps 2 --digest "$tmp/a.sha" --quiet >/dev/null 2>&1
"$PARITY" train --model gpt-micro --steps 2 --micro-batch-size 1 --digest "$tmp/b.sha" --quiet >/dev/null 2>&1
if [ -s "$tmp/a.sha" ] && cmp -s "$tmp/a.sha" "$tmp/b.sha"; then
  ok "micro batch 2 and 1 give identical digests ($(wc -l <"$tmp/a.sha") tensors)"
else
  fail "micro batch 2 and 1 give identical digests" "$(diff "$tmp/a.sha" "$tmp/b.sha" | head -4)"
fi
for th in 2 3; do # compute threads (pool.h): the same bits, gpt-micro and gpt-tiny
  "$PARITY" train --model gpt-micro --steps 2 --threads "$th" --digest "$tmp/t.sha" --quiet >/dev/null 2>&1
  if [ -s "$tmp/t.sha" ] && cmp -s "$tmp/a.sha" "$tmp/t.sha"; then
    ok "--threads $th gives the one-thread digests"
  else
    fail "--threads $th gives the one-thread digests" "$(diff "$tmp/a.sha" "$tmp/t.sha" | head -4)"
  fi
done
"$PARITY" train --model gpt-tiny --steps 2 --digest "$tmp/t1.sha" --quiet >/dev/null 2>&1
"$PARITY" train --model gpt-tiny --steps 2 --threads 2 --digest "$tmp/t2.sha" --quiet >/dev/null 2>&1
if [ -s "$tmp/t1.sha" ] && cmp -s "$tmp/t1.sha" "$tmp/t2.sha"; then
  ok "gpt-tiny: --threads 2 gives the one-thread digests ($(wc -l <"$tmp/t1.sha") tensors)"
else
  fail "gpt-tiny: --threads 2 gives the one-thread digests" "$(diff "$tmp/t1.sha" "$tmp/t2.sha" | head -4)"
fi
expect_error "--threads 0 is refused" "--threads.*out of range" --model gpt-micro --threads 0
expect_error "--threads 65 is refused" "--threads.*out of range" --model gpt-micro --threads 65
expect_error "--threads with a layout is refused" "compute threads are for the one-device golden run" \
  --model gpt-micro --threads 2 --data-parallel-size 2
"$PARITY" train --model gpt-micro --print-config >"$tmp/cfg.json" 2>&1
"$PARITY" train --model "$tmp/cfg.json" --steps 2 --digest "$tmp/c.sha" --quiet >/dev/null 2>&1
if [ -s "$tmp/c.sha" ] && cmp -s "$tmp/a.sha" "$tmp/c.sha"; then
  ok "--print-config fed back as --model gives identical digests"
else
  fail "--print-config fed back as --model gives identical digests" "$(head -3 "$tmp/cfg.json")"
fi

echo "RESULT test_train.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
