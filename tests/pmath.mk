# tests/pmath.mk - extra rules for pmath (deterministic elementwise math).
#
# test_pmath_opt: ref/kernels/pmath.c built a second time at -O0, with its
# global pm_* symbols renamed o0_pm_* (objcopy), linked next to the normal
# library build and compared bit for bit (tests/pmath/test_pmath_opt.c).
# The -O0 copy reuses $(CFLAGS), sanitizer flags included, with only the
# -O flag replaced, so it works in build-asan/, build-ubsan/, build-tsan/.
#
# exhaustive_pmath: every float input against long double libm (minutes;
# not run by `make check`).
#
# pmath-coeffs-check: ref/kernels/pmath.c's generated constants equal
# what tests/pmath/derive_coeffs.py derives (needs python3 with mpmath).

PMATH_O0_CFLAGS := $(filter-out -O%,$(CFLAGS)) -O0
PMATH_O0_OBJ    := $(BUILD)/tests/pmath/pmath_o0.o

$(PMATH_O0_OBJ): ref/kernels/pmath.c include/parity/pmath.h
	@mkdir -p $(dir $@)
	$(CC) $(PMATH_O0_CFLAGS) -c $< -o $@.raw.o
	nm --defined-only --extern-only $@.raw.o | awk '$$3 ~ /^pm_/ { print $$3, "o0_" $$3 }' > $@.syms
	objcopy --redefine-syms=$@.syms $@.raw.o $@

$(BUILD)/tests/test_pmath_opt: tests/pmath/test_pmath_opt.c tests/harness.h $(PMATH_O0_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(PMATH_O0_OBJ) $(LIB) $(LDLIBS) -o $@

EXTRA_TEST_BIN += $(BUILD)/tests/test_pmath_opt

$(BUILD)/pmath/exhaustive_pmath: tests/pmath/exhaustive_pmath.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDLIBS) -o $@

.PHONY: pmath-coeffs-check
pmath-coeffs-check:
	/usr/bin/python3 tests/pmath/derive_coeffs.py --check
