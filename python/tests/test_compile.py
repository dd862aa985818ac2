"""Compile-only through Python: every kernel at its default shape for
sm_90 and sm_120, into this process's own cache directory; what compile()
says it did (compiled, found in memory, found on disk) and how the
keywords override the default shape.  Needs NVRTC, no GPU."""
import os
import subprocess
import sys

import pytest

import _util
import kdtree_jit


def compile_or_skip(kernel, arch, shape=None, **constants):
    try:
        return kdtree_jit.compile(kernel, arch, shape, **constants)
    except kdtree_jit.KdtreeError as e:
        if e.name == "KDTREE_ERROR_NO_COMPILER":
            pytest.skip("no NVRTC: %s" % e.detail)
        raise


def test_every_kernel_compiles_for_sm90_and_sm120():
    kdtree_jit.cache_stats_reset()
    compiled = 0
    for arch in ("sm_90", "sm_120"):
        for kernel in kdtree_jit.kernels():
            shape = kdtree_jit.default_shape(kernel)
            c = compile_or_skip(kernel, arch, shape)
            assert (c.kernel, c.arch, c.shape) == (kernel, arch, shape)
            compiled += c.source == "compiled"
            # Cached by the first: in this process's memory and on disk.
            again = kdtree_jit.compile(kernel, arch, shape)
            assert again.source == "memory" and again.cached, again
            assert again.compile_ms == 0.0
    stats = kdtree_jit.cache_stats()
    assert stats["compiles"] == compiled
    assert stats["compile_ms"] > 0 or compiled == 0


def test_a_compile_says_what_it_did_and_how_long_it_took():
    c = compile_or_skip("tree_accept", "sm_120", N_MAX=41, L=6)
    assert c.source == "compiled" and not c.cached, c
    assert c.shape == "N_MAX=41,L=6"
    assert c.ms > 0 and 0 < c.compile_ms <= c.ms
    # Another process with the same cache directory finds it on disk.
    code = ("import kdtree_jit; c = kdtree_jit.compile('tree_accept', "
            "'sm_120', N_MAX=41, L=6); print(c.source, c.cached, c.ms > 0)")
    env = dict(os.environ)  # the same KDTREE_CACHE_DIR (_util)
    if not env.get("KDTREE_TEST_INSTALLED"):
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.dirname(_util.HERE)] +
            ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    out = subprocess.run([sys.executable, "-c", code], env=env,
                         stdout=subprocess.PIPE, universal_newlines=True,
                         check=True).stdout
    assert out.split() == ["disk", "True", "True"], out


def test_keywords_override_the_default_shape():
    default = dict(kv.split("=") for kv in
                   kdtree_jit.default_shape("tree_accept").split(","))
    c = compile_or_skip("tree_accept", "sm_120", N_MAX=33)
    assert c.shape == "N_MAX=33,L=%s" % default["L"]
    c = compile_or_skip("draft_topk", "sm_120", K=16)
    assert "K=16" in c.shape.split(",") and "DTYPE=" in c.shape
    assert compile_or_skip("tree_accept", "sm_90", "N_MAX=33,L=7").shape == \
        "N_MAX=33,L=7"
    assert kdtree_jit.compile("tree_accept", "sm_90", L=7,
                              N_MAX=33).source == "memory"


def test_an_unknown_constant_is_refused_by_name():
    with pytest.raises(kdtree_jit.KdtreeError,
                       match="KDTREE_ERROR_SHAPE_STRING.*NOPE"):
        kdtree_jit.compile("tree_accept", "sm_120", NOPE=3)


def test_compile_with_no_shape_takes_the_default():
    shape = kdtree_jit.default_shape("tree_accept")
    compile_or_skip("tree_accept", "sm_120", shape)
    c = kdtree_jit.compile("tree_accept", "sm_120")
    assert c.shape == shape and c.cached


def test_info_names_nvrtc_and_the_driver():
    i = kdtree_jit.info()
    assert i["version"] == kdtree_jit.version
    assert i["abi"] == kdtree_jit.EXPECTED_ABI
    for part in ("nvrtc", "driver"):
        d = i[part]
        assert set(d) == {"loaded", "status", "version", "path", "found_by",
                          "detail"}
        if d["loaded"]:
            assert d["status"] == "KDTREE_OK"
            assert d["path"] and d["found_by"]
            assert d["version"].count(".") == 1
        else:
            assert d["status"].startswith("KDTREE_ERROR_")
            assert d["path"] is None or part == "driver"
            assert d["detail"]
    if i["nvrtc"]["loaded"]:
        assert "build" in i["nvrtc"]["detail"]
