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


def _smoke(d, dtype, more=()):
    out = os.path.join(d, "decode-%s.json" % dtype)
    p = _run(["--smoke", "--dtype", dtype, "--requests", "1,2", "--past",
              "40", "--budgets", "3,16,64", "--tokens", "24", "--rounds",
              "6", "--json", out] + list(more))
    assert p.returncode == 0, p.stderr
    return json.load(open(out)), out


def test_bench_smoke_writes_its_json():
    with tempfile.TemporaryDirectory() as d:
        res, out = _smoke(d, "f32")
        assert res["tool"] == "kdtree-decode-bench"
        rows = res["rows"]
        assert [(r["R"], r["budget"]) for r in rows] == \
            [(1, 3), (1, 16), (1, 64), (2, 3), (2, 16), (2, 64)]
        for r in rows:
            assert set(r["phases_us"]) == {"drafter", "draft", "build",
                                           "verify", "accept", "kv_move"}
            assert set(r["kernels_us"]) == {"draft_topk", "build_ddtree",
                                            "verify_attn", "tree_accept"}
            # The phases are intervals of one timed round: they add up.
            assert abs(sum(r["phases_us"].values()) -
                       r["timed_round_us"]) < 1e-6 * r["timed_round_us"]
            assert r["tokens_per_s"] > 0 and r["plain_tokens_per_s"] > 0
            assert r["accept_len"] >= 1
            # 1 + sum of 0.9^d, d up to min(budget, depth 15)
            assert r["expected_accept_len"] == pytest.approx(1 + sum(
                0.9 ** d for d in range(1, min(r["budget"], 15) + 1)))
            # The target's successor chain: plain and tree decoding both
            # follow it, token for token.
            assert r["plain_tokens_off_script"] == 0
            assert r["tokens_off_script"] == 0
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return
        p = subprocess.run([sys.executable, PLOT, out, "-o", d],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        assert p.returncode == 0 and "kdtree-decode.png" in p.stdout, \
            p.stderr


def test_bench_smoke_bf16_follows_the_chain():
    """In bf16 too the successor target leaves no near-tie: tree decoding
    at budgets 3 to 64 gives plain decoding's tokens (the bench's
    construction, decode/targets.py)."""
    with tempfile.TemporaryDirectory() as d:
        res, _ = _smoke(d, "bf16")
        assert res["model"]["dtype"] == "bfloat16"
        for r in res["rows"]:
            assert r["plain_tokens_off_script"] == 0
            assert r["tokens_off_script"] == 0
        # and over an FP8 cache (--kv e4m3)
        res, _ = _smoke(d, "bf16", ["--kv", "e4m3", "--requests", "2",
                                    "--budgets", "16"])
        assert res["kv"] == "e4m3" and len(res["rows"]) == 1
        assert res["rows"][0]["plain_tokens_off_script"] == 0
        assert res["rows"][0]["tokens_off_script"] == 0


def test_bench_says_it_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    p = _run([])
    assert p.returncode == 77
    assert "needs a CUDA device" in p.stderr
