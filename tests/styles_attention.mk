# styles_attention.mk - the `parity` program with a test-only attention
# style (included by the Makefile).
#
# build/tests/parity-two-passes is ref/cli's objects and the library,
# linked with tests/styles/attention_two_passes.c, which registers the
# style ahead of the library's attention_table before main runs. No file
# under ref/ knows it: tests/test_styles_attention.sh runs `parity check`
# with it.

STYLES_ATTENTION_PARITY := $(BUILD)/tests/parity-two-passes
check: $(STYLES_ATTENTION_PARITY)

$(STYLES_ATTENTION_PARITY): tests/styles/attention_two_passes.c $(CLI_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) tests/styles/attention_two_passes.c $(CLI_OBJ) $(LIB) $(LDLIBS) -o $@
