# gdb reads this file when started in the repository (once allowed: see
# README.md, "Stepping through a step in gdb"). It adds the parity commands.
source ref/debug/parity_gdb.py
