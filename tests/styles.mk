# styles.mk - the `parity` program with test-only styles (included by the
# Makefile; tests/styles/).
#
# build/tests/parity-styles is ref/cli's objects and the library, linked
# with tests/styles/linear_split_rows.c, whose constructor registers a
# linear style that wraps the table's choice (style_register). No file
# under ref/ knows it: tests/test_styles.sh runs `parity check` and
# `parity diff` with it, the command lines a user types.

STYLES_PARITY := $(BUILD)/tests/parity-styles
check: $(STYLES_PARITY)

$(STYLES_PARITY): tests/styles/linear_split_rows.c $(CLI_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) tests/styles/linear_split_rows.c $(CLI_OBJ) $(LIB) $(LDLIBS) -o $@
