# fuzz.mk - `make fuzz`: libFuzzer on the readers of untrusted input (the
# JSON parser, safetensors files, model config files, layout flags) and on
# the oracle API's arguments (fuzz_oracle: calls on a golden oracle, dump
# files), built with clang
# under ASan and UBSan. Each target runs FUZZ_SECONDS (default 60) from
# the seeds in tests/fuzz/seeds/<name>/; a crash or a failed property
# (tests/fuzz/*.c) stops it with a reproducer in $(FUZZ_BUILD)/. Not part
# of `make check`: it needs clang and runs for minutes.
#   make fuzz FUZZ_SECONDS=600
#   make fuzz FUZZ_ONLY=oracle FUZZ_SECONDS=600     one target
#   make fuzz-python FUZZ_SECONDS=600               the Python binding's property test
#                                                   (tests/torch/test_oracle_args.py, long mode)
#   build-fuzz/fuzz_json build-fuzz/crash-...      replay one input

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD   := build-fuzz
FUZZ_CFLAGS  := -std=c11 -O1 -g $(WARN) -ffp-contract=off -D_GNU_SOURCE -Iinclude -Iref -I$(OPENBLAS_INC) \
                -pthread -fsanitize=address,undefined -fno-sanitize-recover=all \
                -DPARITY_NO_SIMD_CLONES
FUZZ_SRC     := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN     := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_BUILD)/%)
FUZZ_ONLY    ?=
FUZZ_RUN     := $(if $(FUZZ_ONLY),$(FUZZ_ONLY:%=$(FUZZ_BUILD)/fuzz_%),$(FUZZ_BIN))
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o)
# (clang's function multiversioning does not mix with the sanitizers'
# instrumentation: the fuzz build uses the plain loops, as TSan's does)
.SECONDARY: $(FUZZ_LIB_OBJ)

$(FUZZ_BUILD)/ref/%.o: ref/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_LIB_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB_OBJ) $(LDLIBS) -o $@

.PHONY: fuzz fuzz-python
fuzz: $(FUZZ_RUN)
	@for bin in $(FUZZ_RUN); do \
	  name=$${bin##*/fuzz_}; corpus=$(FUZZ_BUILD)/corpus-$$name; log=$(FUZZ_BUILD)/$$name.log; \
	  mkdir -p $$corpus; echo "== $$bin: $(FUZZ_SECONDS) s (log: $$log)"; \
	  $$bin -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_BUILD)/ $$corpus tests/fuzz/seeds/$$name > $$log 2>&1; rc=$$?; \
	  grep -E 'stat::number_of_executed_units|stat::peak_rss' $$log; \
	  if [ $$rc != 0 ]; then tail -40 $$log; echo "$$bin found a failure (reproducer above)"; exit 1; fi; \
	done

# The binding's random calls for FUZZ_SECONDS (a fresh seed, printed; PARITY_FUZZ_SEED=N
# replays one), on the normal shared library: python cannot load a sanitized one.
fuzz-python: $(SHLIB)
	PARITY_LIB=$(SHLIB) PARITY_FUZZ_SECONDS=$(FUZZ_SECONDS) /usr/bin/python3 tests/torch/test_oracle_args.py

-include $(shell find $(FUZZ_BUILD) -name '*.d' 2>/dev/null)
