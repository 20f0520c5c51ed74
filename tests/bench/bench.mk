# bench.mk - `make bench-large`: the golden step at the GPT-2-124M shape
# against PyTorch eager with one thread, and its phase split
# (tests/bench/bench_large.sh; prints figures, never fails on timing).
.PHONY: bench-large
bench-large: all
	PARITY=$(abspath $(PARITY)) bash tests/bench/bench_large.sh

# The MPI transport against MPI_Allreduce (tests/bench/run.sh runs it
# under mpirun); only with MPI.
ifeq ($(MPI),1)
BENCH_MPI := $(BUILD)/bench/bench_mpi
bench: $(BENCH_MPI)
$(BENCH_MPI): tests/bench/mpi/bench_mpi.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MPI_CFLAGS) -MMD -MP $< $(LIB) $(LDLIBS) -o $@
endif
