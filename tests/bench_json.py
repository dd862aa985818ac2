"""What the tests of kdtree-bench's JSON report share (tests/test_bench.sh,
tests/test_bench_gpu.sh): read the report, collect what is wrong with
it, and end with a skip (77), a failure (1) or the line that says ok.

    r = bench_json.Report("test_bench", path, rc)
    r.need(r.d.get("tool") == "kdtree-bench", "tool is not kdtree-bench")
    r.done("3 rows: ok")
"""
import json
import sys


class Report(object):
    def __init__(self, name, path, rc):
        self.name = name
        self.problems = []
        with open(path) as f:
            try:
                self.d = json.load(f)
            except ValueError as e:
                sys.exit("%s: not JSON: %s" % (name, e))
        self.need(rc == 0, "kdtree-bench exited %d" % rc)

    def skip(self, why):
        print("%s: %s, skipping" % (self.name, why), file=sys.stderr)
        sys.exit(77)

    def need(self, cond, what):
        if not cond:
            self.problems.append(what)

    def done(self, ok):
        if self.problems:
            print("%s: FAIL" % self.name, file=sys.stderr)
            for p in self.problems:
                print("  " + p, file=sys.stderr)
            sys.exit(1)
        print("%s: %s" % (self.name, ok))
