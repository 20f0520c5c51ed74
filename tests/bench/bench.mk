# bench.mk - `make bench-large`: the golden step at the GPT-2-124M shape
# against PyTorch eager with one thread, and its phase split
# (tests/bench/bench_large.sh; prints figures, never fails on timing).
.PHONY: bench-large
bench-large: all
	PARITY=$(abspath $(PARITY)) bash tests/bench/bench_large.sh
