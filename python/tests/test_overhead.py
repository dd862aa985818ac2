"""python/examples/overhead.py where there is no GPU: --stub (a stub
library, CPU tensors) prints a row of figures per kernel, and --schemas
--stub a row per schema feature of its table.  The figures are printed,
never judged: what is tested is that the script runs and says what it
measured."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

import _util

pytest.importorskip("torch")

SCRIPT = os.path.join(os.path.dirname(_util.HERE), "examples",
                      "overhead.py")
NUMBER = r"-?\d+\.\d\d"


def run(tmp, *args):
    if not os.path.exists(SCRIPT):
        pytest.skip("no %s" % SCRIPT)
    # The stub library lands in TMPDIR: the test's own directory.
    env = dict(os.environ, TMPDIR=str(tmp))
    r = subprocess.run([sys.executable, SCRIPT, "--stub", "--calls", "20",
                        "--reps", "1"] + list(args), env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_stub_prints_every_kernel(tmp_path):
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler for the stub library")
    lines = run(tmp_path)
    for k in ("draft_topk", "build_ddtree", "verify_attn", "tree_accept"):
        row = [ln for ln in lines if ln.split()[:1] == [k]]
        assert len(row) == 1, lines
        # 9 columns, 5 differences, then the shape
        assert len(re.findall(r" " + NUMBER, row[0])) == 14, row[0]


def test_schemas_prints_every_row(tmp_path):
    spec = importlib.util.spec_from_file_location("overhead", SCRIPT)
    overhead = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(overhead)
    lines = run(tmp_path, "--schemas")
    assert "torch %s" % __import__("torch").__version__ in lines[0]
    rows = lines[2:]
    assert len(rows) == len(overhead.SCHEMA_ROWS), lines
    for ln, (label, _, how, _) in zip(rows, overhead.SCHEMA_ROWS):
        assert ln[2:].startswith(label), (ln, label)
        figures = re.findall(NUMBER, ln[2 + len(label):])
        # A row whose feature this torch lacks says so.
        assert len(figures) == 2 or (
            how.get("pyobj") and "(not in this torch)" in ln), ln
