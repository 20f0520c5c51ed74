"""ppdp.py - pp.py's 2-stage pipeline times dp 2 (4 ranks)."""
import pp

WORLD = 4


def main(job):
    pp.main(job, dp=2)
