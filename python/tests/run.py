#!/usr/bin/env python3
"""Runs python/tests with pytest, or, where pytest is not installed (the
GPU host has none), with a minimal runner that understands the part of
pytest these tests use: test_* functions, pytest.raises(match=),
pytest.skip(), pytest.mark.skipif, pytest.importorskip.

    python3 python/tests/run.py [-v] [-k SUBSTRING] [test files...]

Exit status: 0 all passed (or skipped), 1 a failure, 77 when every test
was skipped (Automake's "skipped").  KDTREE_TEST_MINIMAL=1 forces the
minimal runner.
"""
import contextlib
import glob
import importlib.util
import os
import re
import sys
import time
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))


class Skipped(Exception):
    pass


def _make_shim():
    m = types.ModuleType("pytest")
    m.__kdtree_shim__ = True

    class RaisesInfo(object):
        value = None
        type = None

    @contextlib.contextmanager
    def raises(exc, match=None):
        info = RaisesInfo()
        try:
            yield info
        except exc as e:
            info.value, info.type = e, type(e)
            if match is not None and not re.search(match, str(e)):
                raise AssertionError("%r does not match %r" % (str(e), match))
        else:
            raise AssertionError("DID NOT RAISE %s" % getattr(exc, "__name__", exc))

    def skip(reason=""):
        raise Skipped(reason)

    def importorskip(name, reason=None):
        try:
            return __import__(name)
        except ImportError:
            raise Skipped(reason or "no module %s" % name)

    class Mark(object):
        def skipif(self, cond, reason=""):
            def deco(f):
                if cond:
                    def skipped(*a, **k):
                        raise Skipped(reason)
                    skipped.__name__ = f.__name__
                    return skipped
                return f
            return deco

        def __getattr__(self, name):  # @pytest.mark.gpu and the like
            return lambda f=None, *a, **k: f if callable(f) else (lambda g: g)

    m.raises = raises
    m.skip = skip
    m.importorskip = importorskip
    m.mark = Mark()
    m.fail = lambda msg="": (_ for _ in ()).throw(AssertionError(msg))
    return m


def run_minimal(files, verbose, key):
    shim = _make_shim()
    sys.modules["pytest"] = shim
    sys.path.insert(0, HERE)
    passed = failed = skipped = 0
    for path in files:
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except Skipped as e:
            print("%s: SKIPPED (%s)" % (name, e))
            skipped += 1
            continue
        except Exception:
            print("%s: ERROR importing" % name)
            traceback.print_exc()
            failed += 1
            continue
        for attr in sorted(vars(mod), key=lambda a: getattr(
                getattr(mod, a), "__code__", None) and
                getattr(mod, a).__code__.co_firstlineno or 0):
            fn = getattr(mod, attr)
            if not attr.startswith("test_") or not callable(fn):
                continue
            if key and key not in attr:
                continue
            t0 = time.time()
            try:
                fn()
            except Skipped as e:
                skipped += 1
                print("%s::%s SKIPPED (%s)" % (name, attr, e))
            except Exception:
                failed += 1
                print("%s::%s FAILED" % (name, attr))
                traceback.print_exc()
            else:
                passed += 1
                if verbose:
                    print("%s::%s PASSED (%.2f s)" % (name, attr,
                                                      time.time() - t0))
    print("minimal runner: %d passed, %d failed, %d skipped"
          % (passed, failed, skipped))
    if failed:
        return 1
    return 77 if skipped and not passed else 0


def main(argv):
    verbose = "-v" in argv
    key = None
    if "-k" in argv:
        key = argv[argv.index("-k") + 1]
    files = [a for a in argv if a.endswith(".py")]
    if not files:
        files = sorted(glob.glob(os.path.join(HERE, "test_*.py")))
    try:
        if os.environ.get("KDTREE_TEST_MINIMAL"):
            raise ImportError("KDTREE_TEST_MINIMAL is set")
        import pytest
    except ImportError as e:
        print("no pytest (%s): using the minimal runner" % e)
        return run_minimal(files, verbose, key)

    class Count(object):
        def __init__(self):
            self.passed = self.skipped = 0

        def pytest_runtest_logreport(self, report):
            if report.when == "call" and report.passed:
                self.passed += 1
            if report.skipped:
                self.skipped += 1

    c = Count()
    # -s: the GPU tests print their figures for the log.
    args = ["-rs", "-s", "-p", "no:cacheprovider", "--rootdir", HERE]
    args += ["-v"] if verbose else ["-q"]
    if key:
        args += ["-k", key]
    rc = pytest.main(args + files, plugins=[c])
    if rc == 0 and c.skipped and not c.passed:
        return 77
    return int(rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
