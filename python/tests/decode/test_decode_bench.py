"""python/examples/decode_bench.py: its tiny CPU configuration runs and
writes the JSON tools/kdtree-plot draws; without a CUDA device the real
one says so and exits with 77."""
import json
import os
import subprocess
import sys
import tempfile

import pytest

import _tiny
from _tiny import torch

TOP = os.path.dirname(os.path.dirname(os.path.dirname(_tiny.HERE)))
BENCH = os.path.join(TOP, "python", "examples", "decode_bench.py")
PLOT = os.path.join(TOP, "tools", "kdtree-plot")


def _run(args):
    env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"),
               OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, BENCH] + args, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=600)


def test_bench_smoke_writes_its_json():
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "decode.json")
        p = _run(["--smoke", "--requests", "1,2", "--past", "40",
                  "--budgets", "3,8", "--tokens", "32", "--json", out])
        assert p.returncode == 0, p.stderr
        res = json.load(open(out))
        assert res["tool"] == "kdtree-decode-bench"
        rows = res["rows"]
        assert [(r["R"], r["budget"]) for r in rows] == \
            [(1, 3), (1, 8), (2, 3), (2, 8)]
        for r in rows:
            assert set(r["phases_us"]) == {"draft", "build", "verify",
                                           "accept", "kv_move"}
            assert r["tokens_per_s"] > 0 and r["plain_tokens_per_s"] > 0
            assert r["accept_len"] >= 1
            # f32 on a CPU: the tree decoder is plain decoding, token for
            # token.
            assert r["tokens_differing_from_plain"] == 0
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return
        p = subprocess.run([sys.executable, PLOT, out, "-o", d],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        assert p.returncode == 0 and "kdtree-decode.png" in p.stdout, \
            p.stderr


def test_bench_says_it_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    p = _run([])
    assert p.returncode == 77
    assert "needs a CUDA device" in p.stderr
