# machine.sh - sourced by the bench scripts: one line naming the CPU and
# the OpenBLAS core type (Debian's OpenBLAS picks its kernels at load
# time; OPENBLAS_CORETYPE overrides), which every figure depends on.
bench_machine() {
  local cpu core
  cpu=$(lscpu 2>/dev/null | sed -nE 's/^Model name: *//p' | head -1)
  core=${OPENBLAS_CORETYPE:-$(/usr/bin/python3 -c "import ctypes
l = ctypes.CDLL('/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0')
l.openblas_get_corename.restype = ctypes.c_char_p
print(l.openblas_get_corename().decode())" 2>/dev/null || echo unknown)}
  echo "CPU: ${cpu:-unknown}, $(nproc) cores; OpenBLAS core type: $core"
}
