"""The pass/fail tally of the Python check clients (openai_client.py, replicas_client.py,
ray_check.py): each check counts once, and a failure is printed as it happens."""
import sys


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def ok(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed.append(what)
            print("FAIL: " + what, file=sys.stderr)
        return cond
