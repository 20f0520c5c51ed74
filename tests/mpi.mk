# mpi.mk - the MPI transport's collective test program (tests/cli/test_mpi.sh
# runs it as threads and under mpirun). Not a test_*.c of a test folder: run.sh
# would start it without mpirun.
MPI_COLL_BIN := $(BUILD)/tests/mpi_coll
TEST_HELPERS += $(MPI_COLL_BIN)
$(MPI_COLL_BIN): tests/mpi/mpi_coll.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP $< $(LIB) $(LDLIBS) -o $@
