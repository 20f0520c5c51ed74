#!/usr/bin/env bash
# test_help_flags.sh - walks `parity train --help`, `parity check --help`,
# `parity plan --help`, `parity svg --help`, `parity modes --help` and `parity diff`'s flags, train
# and check on every built-in model family (dense GPT, MoE, T5, LLaVA):
# every flag they name, given a missing or invalid value (or, for a flag
# without a value, given where it cannot apply, or twice), must be refused
# with a non-zero exit that is not a signal, within the time limit, and a
# message naming the flag; never a crash, a hang or a silent exit 0. Every
# PARITY_* variable the help names, set to garbage, must be refused
# naming the variable. A flag added to --help is covered without editing
# this file; one that is neither refused nor named fails here.
#
# Needs $PARITY (default build/parity). Runs in a private directory, so
# nothing a run might write lands in the tree.
# Ends with "RESULT test_help_flags.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
PARITY=$(cd "$(dirname "$PARITY")" && pwd)/$(basename "$PARITY")
cd "$(dirname "$0")/../.."
. tests/refuse.sh parity-help
P="$PARITY"
missing=/nonexistent-parity-dir/x # a path whose directory does not exist

# The flags a --help names (prose included: a flag named anywhere is a
# flag), and whether it takes a value: somewhere in the help it is
# followed by a metavariable (N, FILE, a|b, model.optim.KEY=VALUE, fp32).
flags_of() {
  "$P" "$1" --help | grep -oE -- '--[a-z0-9][a-z0-9-]*( [^ ]+)?' | awk '
    { f = $1; v = $2
      if (!(f in seen)) { seen[f] = 1; order[++n] = f; val[f] = 0 }
      if (v ~ /^([A-Z][A-Z0-9,.]*|[a-z0-9]+(\|[a-z0-9]+)+|model\.optim\..*|fp32)$/) val[f] = 1 }
    END { for (i = 1; i <= n; i++) print order[i], val[order[i]] }'
}

# A context where a flag without a value cannot apply; "" = give it twice.
context_of() {
  case $1 in
    --print-config|--print-layout) echo "--dump $missing" ;;
    --sequence-parallel|--tensor-parallel-row-linears) echo "" ;;
    --overlap-param-gather) echo "--data-parallel-size 2" ;;
    *) echo twice ;;
  esac
}

# An invalid value for a flag, by its kind.
bad_value_of() {
  case $1 in
    --dump|--digest|--trace|--save|--output) echo "$missing" ;;
    --load|--data|--parallel-config) echo "$missing" ;;
    --model|--config) echo "$missing.json" ;;
    *) echo "@bad@" ;;
  esac
}

for cmd in train check; do
  base="$P $cmd --model gpt-micro --steps 1"
  n=0
  while read -r flag takes; do
    n=$((n + 1))
    name=${flag#--}
    pat="(^|[^a-z-])-?-?$name([^a-z-]|$)" # the flag, with or without its dashes (a layout key)
    b=$base
    case $flag in --model|--config|--steps) b="$P $cmd" ;; esac
    [ "$flag" = --steps ] && b="$P $cmd --model gpt-micro"
    if [ "$takes" = 1 ]; then
      refuse "$cmd $flag with its value missing" "$pat" -- $b $flag
      refuse "$cmd $flag followed by a flag" "$pat" -- $b $flag --quiet
      refuse "$cmd $flag with an invalid value" "$pat" -- $b $flag "$(bad_value_of "$flag")"
    else
      ctx=$(context_of "$flag")
      if [ "$ctx" = twice ]; then
        refuse "$cmd $flag given twice" "$pat" -- $b $flag $flag
      else
        refuse "$cmd $flag where it cannot apply" "$pat" -- $b $flag $ctx
      fi
    fi
  done < <(flags_of $cmd)
  if [ "$n" -lt 40 ]; then fail "$cmd --help names its flags" "only $n flags found"; else ok "$cmd --help names $n flags"; fi
done

# The other built-in model families: every flag of train and check, given
# an invalid value (or, without one, twice or where it cannot apply), on
# a mixture of experts, an encoder-decoder and LLaVA too: whatever the
# model, a flag is used or refused by name (test_flag_table.sh holds the
# flags that cannot apply to a family). The families run side by side.
family() { # NAME BASE...: one family's cases, printed as ok / not ok lines
  local fam=$1; shift
  . tests/refuse.sh parity-help-family
  # refuse without the work directory's snapshots (the first pass checks
  # those; here the cost is the process count)
  refuse() {
    local name=$1 pat=$2; shift 3
    (cd "$w" && exec timeout 30 "$@" >/dev/null 2>"$tmp/err"); local rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then fail "$name" "exit $rc"
    elif ! grep -qE -- "$pat" "$tmp/err"; then fail "$name" "message does not match /$pat/:" "$(cat "$tmp/err")"
    else ok "$name"; fi
  }
  for cmd in train check; do
    while read -r flag takes; do
      case " $* " in *" $flag "*) continue ;; esac # the family's own flag
      case $flag in --model|--config|--steps) continue ;; esac
      name=${flag#--}
      pat="(^|[^a-z-])-?-?$name([^a-z-]|$)"
      b="$P $cmd $* --steps 1"
      if [ "$takes" = 1 ]; then
        refuse "$fam: $cmd $flag with an invalid value" "$pat" -- $b $flag "$(bad_value_of "$flag")"
      else
        ctx=$(context_of "$flag")
        if [ "$ctx" = twice ]; then refuse "$fam: $cmd $flag given twice" "$pat" -- $b $flag $flag
        else refuse "$fam: $cmd $flag where it cannot apply" "$pat" -- $b $flag $ctx; fi
      fi
    done < <(flags_of $cmd)
  done
}
pids=()
for f in "moe|--model gpt-micro --num-experts 4" "t5|--model t5-tiny" "llava|--model llava-tiny"; do
  family "${f%%|*}" ${f#*|} >"$tmp/family-${f%%|*}" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
for f in moe t5 llava; do
  cat "$tmp/family-$f"
  passed=$((passed + $(grep -c '^ok' "$tmp/family-$f")))
  failed=$((failed + $(grep -c '^not ok' "$tmp/family-$f")))
  [ "$(grep -c '^ok' "$tmp/family-$f")" -ge 100 ] && ok "$f: $(grep -c '^ok' "$tmp/family-$f") flag cases" ||
    fail "$f: too few flag cases ran"
done

# parity plan's own flags, the same rules (its --help is shorter).
n=0
while read -r flag takes; do
  n=$((n + 1))
  name=${flag#--}
  pat="(^|[^a-z-])-?-?$name([^a-z-]|$)"
  case $flag in # the other required flags, never the one under test
    --model) b="$P plan --devices 2 --device-memory-mb 1000" ;;
    --devices) b="$P plan --model gpt-micro --device-memory-mb 1000" ;;
    --device-memory-mb) b="$P plan --model gpt-micro --devices 2" ;;
    *) b="$P plan --model gpt-micro --devices 2 --device-memory-mb 1000" ;;
  esac
  if [ "$takes" = 1 ]; then
    refuse "plan $flag with its value missing" "$pat" -- $b $flag
    refuse "plan $flag followed by a flag" "$pat" -- $b $flag --json
    refuse "plan $flag with an invalid value" "$pat" -- $b $flag "$(bad_value_of "$flag")"
  else
    refuse "plan $flag given twice" "$pat" -- $b $flag $flag
  fi
done < <(flags_of plan)
if [ "$n" -lt 7 ]; then fail "plan --help names its flags" "only $n flags found"; else ok "plan --help names $n flags"; fi

# parity modes' flags, the same rules (a value-less flag given twice).
n=0
while read -r flag takes; do
  n=$((n + 1))
  name=${flag#--}
  pat="(^|[^a-z-])-?-?$name([^a-z-]|$)"
  b="$P modes"; [ "$flag" = --seed ] && b="$P modes --sample 1"
  if [ "$takes" = 1 ]; then
    refuse "modes $flag with its value missing" "$pat" -- $b $flag
    refuse "modes $flag followed by a flag" "$pat" -- $b $flag --tsv
    refuse "modes $flag with an invalid value" "$pat" -- $b $flag "$(bad_value_of "$flag")"
  else
    refuse "modes $flag given twice" "$pat" -- $b $flag $flag
  fi
done < <(flags_of modes)
if [ "$n" -lt 4 ]; then fail "modes --help names its flags" "only $n flags found"; else ok "modes --help names $n flags"; fi

# parity svg's flags: each picture's own, and the layout flags of the
# grid, given an invalid value (or, without one, twice), in the picture
# that takes them: refused naming the flag.
(cd "$w" && "$P" train --model gpt-micro --steps 1 --quiet --data-parallel-size 2 --trace t.json >/dev/null)
n=0
while read -r flag takes; do
  n=$((n + 1))
  name=${flag#--}
  pat="(^|[^a-z-])-?-?$name([^a-z-]|$)"
  case $flag in
    --logical) b="$P svg schedule $w/t.json -o $w/s.svg" ;;
    --ranks|--algo) b="$P svg collective all-reduce -o $w/s.svg" ;;
    --output) b="$P svg grid" ;;
    --help) continue ;;
    *) b="$P svg grid -o $w/s.svg" ;;
  esac
  [ "$flag" != --ranks ] && case $b in *collective*) b="$b --ranks 4" ;; esac
  if [ "$takes" = 1 ]; then
    refuse "svg $flag with its value missing" "$pat" -- $b $flag
    refuse "svg $flag with an invalid value" "$pat" -- $b $flag "$(bad_value_of "$flag")"
  else
    refuse "svg $flag given twice" "$pat" -- $b $flag $flag
  fi
done < <(flags_of svg)
if [ "$n" -lt 15 ]; then fail "svg --help names its flags" "only $n flags found"; else ok "svg --help names $n flags"; fi

# parity diff's flags
(cd "$w" && "$P" train --model gpt-micro --steps 1 --quiet --dump a.st >/dev/null)
refuse "diff --quiet given twice" "quiet" -- $P diff "$w/a.st" "$w/a.st" --quiet --quiet
refuse "diff --max-rows with an invalid value" "max-rows" -- $P diff "$w/a.st" "$w/a.st" --max-rows @bad@
refuse "diff --max-rows with a leading blank" "max-rows" -- $P diff "$w/a.st" "$w/a.st" --max-rows " 1"
refuse "diff --max-rows missing its value" "max-rows" -- $P diff "$w/a.st" "$w/a.st" --max-rows

# Every PARITY_* variable the help names, set to garbage.
vars=$("$P" train --help | grep -oE 'PARITY_[A-Z_]+' | sort -u)
[ -n "$vars" ] && ok "train --help names $(wc -w <<<"$vars") environment variables" || fail "train --help names environment variables"
for v in $vars; do
  refuse "$v=@bad@" "$v" -- env "$v=@bad@" $P train --model gpt-micro --steps 1 --print-config
  refuse "$v=1e300 in check" "$v" -- env "$v=1e300" $P check --model gpt-micro --steps 1 --data-parallel-size 2
done

echo "RESULT test_help_flags.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
