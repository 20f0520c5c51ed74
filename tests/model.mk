# model.mk - extra rules for the golden model (included by the Makefile).
#
#   make golden   regenerate golden/ from portable-backend runs (I5):
#                 golden/<model>.sha256 for each run in golden/manifest.txt
#                 and the full dump golden/gpt-micro.safetensors
#   make check    also builds $(BUILD)/o0/parity, the whole program at -O0,
#                 so tests/layouts/test_model_golden.sh can show that the digests
#                 reproduce at -O0 as well as at -O2 (not under sanitizers,
#                 whose builds already take long enough)
#   $(BUILD)/plain/parity   the diagnostic build with plain fp32 sums instead
#                 of exact ones (-DPARITY_PLAIN_SUMS), for the benchmark's
#                 cost-of-exactness figure and the demo of drift; never
#                 golden. make check builds it too (not under sanitizers)
#                 for tests/layouts/test_plain_sums.sh

MODEL_O0_PARITY := $(BUILD)/o0/parity
MODEL_PLAIN_PARITY := $(BUILD)/plain/parity
# Every source and header, internal ones under ref/ included: a nested
# build's own dependency files are not read by this make, so a changed
# header must make the nested make run (it then rebuilds what changed).
MODEL_ALL_SRC := $(LIB_SRC) $(CLI_SRC) $(wildcard include/parity/*.h) \
                 $(shell find ref -name '*.h')

# A nested make with its own build directory and optimisation level: the
# same rules, the same CFLAGS otherwise.
$(MODEL_O0_PARITY): $(MODEL_ALL_SRC)
	$(MAKE) --no-print-directory BUILD=$(BUILD)/o0 OPT=-O0 $@

$(MODEL_PLAIN_PARITY): $(MODEL_ALL_SRC)
	$(MAKE) --no-print-directory BUILD=$(BUILD)/plain EXTRA_CFLAGS="$(EXTRA_CFLAGS) -DPARITY_PLAIN_SUMS" $@

ifeq ($(SAN),)
check: $(MODEL_O0_PARITY) $(MODEL_PLAIN_PARITY)
endif

golden: $(PARITY)
	PARITY=$(abspath $(PARITY)) bash golden/regen.sh
