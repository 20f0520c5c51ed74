# custom_unit.mk - the `parity` program with a test-only model (included by
# the Makefile).
#
# build/tests/parity-scaled is ref/cli's objects and the library, linked
# with tests/parity_scaled.c, which registers the test-only unit kind of
# tests/unit_scaled_residual.c (a scaled residual layer with a 3-D
# parameter) in place of the transformer layer before main runs. No file
# under ref/ knows the kind: tests/layouts/test_custom_check.sh runs `parity
# check` on it, the same command line a user types.

CUSTOM_PARITY := $(BUILD)/tests/parity-scaled
check: $(CUSTOM_PARITY)

$(CUSTOM_PARITY): tests/parity_scaled.c tests/unit_scaled_residual.c $(CLI_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) tests/parity_scaled.c $(CLI_OBJ) $(LIB) $(LDLIBS) -o $@
