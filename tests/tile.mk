# tile.mk - extra rules for the tile GEMM kernel (included by the Makefile).
#
# test_tile_opt: ref/kernels/tile_portable.c built again at -O0, -O2 and
# (on x86-64) -O3 -mavx2 -mfma, with the entry points renamed so all builds
# link into one binary next to the library's copy; it checks they give the
# same bits. The flags are this build's CFLAGS (sanitizers included) with
# only the -O level swapped.
#
# The backends' GFLOP/s: tests/bench/bench_tile.c, run by `make bench`.

TILE_PORTABLE_SRC := ref/kernels/tile_portable.c
TILE_OPT_CFLAGS   := $(filter-out -O%,$(CFLAGS))
tile_rename = -Dtile_portable_nn=tile_portable_nn_$(1) -Dtile_portable_nt=tile_portable_nt_$(1) \
              -Dtile_portable_tn=tile_portable_tn_$(1)

TILE_OPT_OBJ := $(BUILD)/tests/tile/tile_portable_O0.o $(BUILD)/tests/tile/tile_portable_O2.o
TILE_OPT_DEFS :=
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine)),)
TILE_OPT_OBJ  += $(BUILD)/tests/tile/tile_portable_avx2.o
TILE_OPT_DEFS += -DTILE_OPT_AVX2
endif

$(BUILD)/tests/tile/tile_portable_O0.o: $(TILE_PORTABLE_SRC) include/parity/tile.h
	@mkdir -p $(dir $@)
	$(CC) $(TILE_OPT_CFLAGS) -O0 $(call tile_rename,O0) -MMD -MP -c $< -o $@

$(BUILD)/tests/tile/tile_portable_O2.o: $(TILE_PORTABLE_SRC) include/parity/tile.h
	@mkdir -p $(dir $@)
	$(CC) $(TILE_OPT_CFLAGS) -O2 $(call tile_rename,O2) -MMD -MP -c $< -o $@

$(BUILD)/tests/tile/tile_portable_avx2.o: $(TILE_PORTABLE_SRC) include/parity/tile.h
	@mkdir -p $(dir $@)
	$(CC) $(TILE_OPT_CFLAGS) -O3 -mavx2 -mfma $(call tile_rename,avx2) -MMD -MP -c $< -o $@

$(BUILD)/tests/test_tile_opt: tests/tile/test_tile_opt.c tests/harness.h $(TILE_OPT_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(TILE_OPT_DEFS) -MMD -MP $< $(TILE_OPT_OBJ) $(LIB) $(LDLIBS) -o $@

EXTRA_TEST_BIN += $(BUILD)/tests/test_tile_opt
