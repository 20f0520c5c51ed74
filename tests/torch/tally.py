"""tally.py - the "ok" / "not ok" lines of a Python test and its closing
"RESULT name: N passed, M failed" line (tests/run.sh adds those up)."""


class Tally:
    def __init__(self, name):
        self.name, self.passed, self.failed = name, 0, 0

    def check(self, what, cond, detail=""):
        """One test: cond true passes; a failure prints detail below it."""
        if cond:
            self.passed += 1
            print(f"ok      {what}")
        else:
            self.failed += 1
            print(f"not ok  {what}")
            if detail:
                print(f"  {detail}")

    def finish(self):
        """The closing line; the exit status for it (0: nothing failed)."""
        print(f"RESULT {self.name}: {self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1
