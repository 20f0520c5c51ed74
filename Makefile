# parity - build, test, sanitize, benchmark.
#
#   make            library, the `parity` program and the test binaries
#   make demo       3-D gpt-tiny (dp 2 x tp 2 + SP x pp 2, 1F1B, ZeRO-1) beside the golden run
#   make demo-encdec  llava-tiny on an encoder mesh (etp 1, epp 1) beside the decoder's (tp 2, pp 2), dp 2
#   make check      run every test; ends with "N passed, N failed"
#   make check-mpi-hosts  the MPI transport between two hosts (network namespaces, root)
#   make check-slow the slow tests: 16384 simulated devices (tests/layouts/test_scale_16k.sh)
#   make check-compose  every pair of modes at gpt-tiny's size and 200 random 3- and 4-way
#                   compositions (tests/compose/test_pairs.sh; make check runs the small pairs)
#   make asan | tsan | ubsan   the same tests under a sanitizer
#   make bench      benchmarks against memcpy, OpenMPI, PyTorch, OpenBLAS
#   make fuzz       libFuzzer on the readers of untrusted input (tests/fuzz.mk)
#   make install PREFIX=DIR   headers, libparity.a, libparity.so, parity.pc, the Python
#                   binding and the corpus under DIR (default /usr/local)
#
# Sources are discovered, not listed: every ref/**/*.c goes into the
# library except ref/cli/ (the program), every test_*.c of a test folder
# (TEST_DIRS: tests/ itself, unit/, layouts/, cli/, reports/, compose/; tests/README.md)
# becomes one test binary $(BUILD)/tests/test_NAME, every
# tests/bench/bench_*.c one benchmark binary. Extra rules live in tests/*.mk
# and tests/bench/*.mk fragments.

CC       ?= cc
BUILD    ?= build
OPT      ?= -O2
SAN      ?=
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
# The pthread build of OpenBLAS, named by path so that Debian's
# alternatives can never swap in the serial build (unsafe with threads).
OPENBLAS_INC ?= /usr/include/$(MULTIARCH)/openblas-pthread
OPENBLAS_LIB ?= /usr/lib/$(MULTIARCH)/openblas-pthread

WARN     := -Wall -Wextra -Werror
# -ffp-contract=off: no fused multiply-add behind our back (I5).
# -fvect-cost-model=cheap: GCC's -O2 default ("very cheap") refuses loops
# of unknown length such as the exact-sum kernels; vectorising never
# reorders a floating-point reduction without -ffast-math, so bits do not
# change.
# -fno-trapping-math: nothing here reads floating-point exception flags;
# it lets GCC turn selects (a < b ? x : y) into blends, so branch-free
# lanes such as pmath's exp and GeLU vectorise. No value changes: it
# implies no reassociation, no finite-math or signed-zero shortcuts.
# -fno-math-errno: sqrt is one instruction, not a call that may set errno.
CFLAGS   := -std=c11 $(OPT) -g $(WARN) -ffp-contract=off -fno-fast-math -fno-trapping-math \
            -fno-math-errno \
            -fvect-cost-model=cheap \
            -D_GNU_SOURCE -Iinclude -Iref -I$(OPENBLAS_INC) -pthread $(EXTRA_CFLAGS)
LDLIBS   := -L$(OPENBLAS_LIB) -Wl,-rpath,$(OPENBLAS_LIB) -lopenblas -lm -pthread

# The MPI transport (ref/coll/mpi/) when OpenMPI's mpicc is here (Debian's
# libopenmpi-dev); without it the same files build a parity that refuses
# to run under mpirun. MPI=0 leaves it out on purpose.
MPI      ?= $(if $(shell command -v mpicc 2>/dev/null),1,0)
ifeq ($(MPI),1)
MPI_CFLAGS := -DPARITY_HAVE_MPI $(patsubst -I%,-isystem %,$(shell mpicc --showme:compile))
MPI_LIBS   := $(shell mpicc --showme:link)
LDLIBS     += $(MPI_LIBS)
endif

ifneq ($(SAN),)
CFLAGS   += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDLIBS   += -fsanitize=$(SAN)
endif

LIB_SRC   := $(shell find ref -name '*.c' -not -path 'ref/cli/*' | sort)
CLI_SRC   := $(sort $(wildcard ref/cli/*.c))
# The folders whose test_*.c and test_*.sh make check runs; other folders
# under tests/ (torch/ aside) hold helpers or add their tests in a tests/*.mk.
TEST_DIRS := tests tests/unit tests/layouts tests/cli tests/reports tests/compose
TEST_SRC  := $(sort $(foreach d,$(TEST_DIRS),$(wildcard $(d)/test_*.c)))
BENCH_SRC := $(sort $(wildcard tests/bench/bench_*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ   := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_BIN  := $(addprefix $(BUILD)/tests/,$(notdir $(TEST_SRC:.c=)))
BENCH_BIN := $(BENCH_SRC:tests/bench/%.c=$(BUILD)/bench/%)
LIB       := $(BUILD)/libparity.a
PARITY    := $(BUILD)/parity
# Script tests: shell and Python checks that drive the parity program.
# Slow tests (minutes, most of the host's memory) run only in check-slow.
SLOW_TESTS   := tests/layouts/test_scale_16k.sh
SCRIPT_TESTS := $(filter-out $(SLOW_TESTS),$(sort $(foreach d,$(TEST_DIRS),$(wildcard $(d)/test_*.sh)))) \
                $(sort $(wildcard tests/torch/test_*.py))
EXTRA_TEST_BIN :=
# Programs the script tests drive (built by make check, never run as tests themselves).
TEST_HELPERS :=

.PHONY: all check check-compose check-mpi-hosts check-slow asan tsan ubsan bench clean golden demo demo-encdec install shared
all: $(LIB) $(PARITY) $(TEST_BIN)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/ref/coll/mpi/%.o: ref/coll/mpi/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(PARITY): $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS) $(CLI_OBJ) $(LIB) $(LDLIBS) -o $@

# one rule per test folder; the binaries sit side by side in $(BUILD)/tests/
define test_rule
$$(BUILD)/tests/%: $(1)/%.c tests/harness.h $$(LIB)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) -MMD -MP $$< $$(LIB) $$(LDLIBS) -o $$@
endef
$(foreach d,$(TEST_DIRS),$(eval $(call test_rule,$(d))))

$(BUILD)/bench/%: tests/bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< $(LIB) $(LDLIBS) -o $@

-include tests/*.mk tests/bench/*.mk

# libparity for other programs (README, "Using parity as an oracle"): the
# static library above, and a shared one from the same sources compiled
# with -fPIC into $(BUILD)/pic/, so the objects of every other target
# stay as they are. The shared library exports every external symbol of
# ref/ (v1: include/parity/*.h is the API; the rest is not promised) and
# carries its dependencies (OpenBLAS's pthread build by path and rpath,
# MPI when built with it), so a program links -lparity alone.
# -Bsymbolic: parity's calls to its own functions bind to its own, even in
# a process that loaded another library first exporting the same name
# (accum.h's acc_init and acc_free are also libgomp's OpenACC functions,
# and PyTorch loads libgomp: without it the oracle called those).
PREFIX   ?= /usr/local
SHLIB    := $(BUILD)/libparity.so
PIC_OBJ  := $(LIB_SRC:%.c=$(BUILD)/pic/%.o)
PC_LIBS_PRIVATE := $(strip $(LDLIBS))
PYDIR    := lib/python3/dist-packages

shared: $(SHLIB)

$(BUILD)/pic/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fPIC -MMD -MP -c $< -o $@

$(BUILD)/pic/ref/coll/mpi/%.o: ref/coll/mpi/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -fPIC -MMD -MP -c $< -o $@

$(SHLIB): $(PIC_OBJ)
	$(CC) -shared -Wl,-soname,libparity.so -Wl,-Bsymbolic -o $@ $^ $(LDLIBS)

# Each file goes in with install(1) (a new file renamed over the old), the
# .pc last: a pkg-config user never sees a half-installed library.
install: $(LIB) $(SHLIB)
	install -d $(DESTDIR)$(PREFIX)/include/parity $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	  $(DESTDIR)$(PREFIX)/share/parity $(DESTDIR)$(PREFIX)/$(PYDIR)/parity
	install -m 644 include/parity/*.h $(DESTDIR)$(PREFIX)/include/parity/
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libparity.a
	install -m 755 $(SHLIB) $(DESTDIR)$(PREFIX)/lib/libparity.so
	install -m 644 ref/data/corpus.txt $(DESTDIR)$(PREFIX)/share/parity/corpus.txt
	install -m 644 ref/python/parity/*.py $(DESTDIR)$(PREFIX)/$(PYDIR)/parity/
	@mkdir -p $(BUILD)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBS_PRIVATE@|$(PC_LIBS_PRIVATE)|' \
	  ref/parity.pc.in > $(BUILD)/parity.pc
	install -m 644 $(BUILD)/parity.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/parity.pc

# The programs and test binaries are built on every core first (a plain
# `make check` would build its prerequisites one at a time); the shared
# library too, for tests/cli/test_install.sh and the Python binding's tests.
CHECK_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
check:
	$(MAKE) --no-print-directory -j$(CHECK_JOBS) all $(TEST_BIN) $(EXTRA_TEST_BIN) $(TEST_HELPERS) $(SHLIB)
	PARITY=$(abspath $(PARITY)) BUILD=$(abspath $(BUILD)) \
	  bash tests/run.sh $(TEST_BIN) $(EXTRA_TEST_BIN) $(SCRIPT_TESTS)

# The MPI transport between two hosts: network namespaces joined by veth
# (root and iproute2; tests/mpi_hosts.sh).
check-mpi-hosts: all $(MPI_COLL_BIN)
	PARITY=$(abspath $(PARITY)) BUILD=$(abspath $(BUILD)) bash tests/mpi_hosts.sh

# 16384 simulated devices (PARITY_MAX_DEVICES) bit-exact on one host.
check-slow: all
	PARITY=$(abspath $(PARITY)) BUILD=$(abspath $(BUILD)) bash tests/run.sh $(SLOW_TESTS)

# The composition matrix at a larger size, and a larger random sample.
COMPOSE_SAMPLE ?= 200
check-compose: all
	PARITY=$(abspath $(PARITY)) BUILD=$(abspath $(BUILD)) PARITY_COMPOSE_SIZE=large \
	  PARITY_COMPOSE_SAMPLE=$(COMPOSE_SAMPLE) bash tests/run.sh tests/compose/test_pairs.sh

# Sanitizer builds run the same tests; the data-parallel matrix shrinks
# to the layouts that still cover every stage, algorithm and overlap.
asan:
	PARITY_DP_MATRIX=small $(MAKE) check BUILD=build-asan SAN=address
ubsan:
	PARITY_DP_MATRIX=small $(MAKE) check BUILD=build-ubsan SAN=undefined
# TSan needs -O1 or more and its own build of every object.
tsan:
	PARITY_DP_MATRIX=small TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  $(MAKE) check BUILD=build-tsan SAN=thread

# The main demo: 3-D parallelism on gpt-tiny (dp 2 x tp 2 with sequence
# parallelism x pp 2, 1F1B over 4 microbatches, ZeRO-1: 8 devices) next to
# the golden run. The golden run's losses, then the layout's with its
# memory, traffic and pipeline report and a Chrome trace of the run, then
# the checker's equivalence table: every tensor of 3 steps, bit for bit.
# The trace's schedule is also drawn (parity svg schedule --logical).
DEMO_3D := --data-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel \
  --pipeline-model-parallel-size 2 --pipeline-schedule 1f1b --num-microbatches 4 --zero-stage 1
demo: all
	@echo "== the golden run: one device"
	$(PARITY) train --model gpt-tiny --steps 5
	@echo "== the same 5 steps on 8 devices: $(DEMO_3D)"
	$(PARITY) train --model gpt-tiny --steps 5 $(DEMO_3D) --trace $(BUILD)/demo-trace.json
	@echo "== the pipeline schedule of that trace, as a picture: $(BUILD)/demo-schedule.svg"
	$(PARITY) svg schedule $(BUILD)/demo-trace.json --logical -o $(BUILD)/demo-schedule.svg
	@echo "== the checker: every activation, gradient, updated parameter and AdamW state of 3 steps, memcmp"
	$(PARITY) check --model gpt-tiny --steps 3 $(DEMO_3D)

# The encoder-decoder demo: llava-tiny (a ViT encoder and a projector
# before a GPT decoder) with the encoder on a mesh of its own - etp 1
# beside the decoder's tp 2, epp 1 stage before the decoder's pp 2,
# dp 2: 2 + 8 devices - next to the golden run: both meshes and the
# bridge (--print-layout), the losses, the bridge's traffic against its
# formula, then the checker's table: every tensor of 3 steps, bit for bit.
DEMO_ENCDEC := --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 2 --encoder-pipeline-model-parallel-size 1 \
  --data-parallel-size 2 --num-microbatches 2
demo-encdec: all
	@echo "== the golden run: one device"
	$(PARITY) train --model llava-tiny --steps 5
	@echo "== the meshes: $(DEMO_ENCDEC)"
	$(PARITY) train --model llava-tiny $(DEMO_ENCDEC) --print-layout
	@echo "== the same 5 steps on them"
	$(PARITY) train --model llava-tiny --steps 5 $(DEMO_ENCDEC)
	@echo "== the checker: every activation, gradient, updated parameter and AdamW state of 3 steps, memcmp"
	$(PARITY) check --model llava-tiny --steps 3 $(DEMO_ENCDEC)

bench: all $(BENCH_BIN)
	BUILD=$(abspath $(BUILD)) PARITY=$(abspath $(PARITY)) bash tests/bench/run.sh

clean:
	rm -rf build build-asan build-tsan build-ubsan build-o0 build-fuzz

-include $(shell find $(BUILD) -name '*.d' -not -path '$(BUILD)/tests/*' 2>/dev/null)
# A test's dependency file names its source first; one whose source has
# moved to another test folder would stop make ("No rule to make target"),
# so it is left out and the test rebuilt.
TEST_DEP_FILES := $(shell find $(BUILD)/tests -name '*.d' 2>/dev/null)
-include $(foreach d,$(TEST_DEP_FILES),$(if $(wildcard $(word 2,$(file <$(d)))),$(d)))
