"""Compile-only through Python: every kernel at its default shape for
sm_90 and sm_120, into this process's own cache directory; the second
compile is a cache hit.  Needs NVRTC, no GPU."""
import pytest

import kdtree_jit


def compile_or_skip(kernel, arch, shape):
    try:
        return kdtree_jit.compile(kernel, arch, shape)
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
            was_cached = compile_or_skip(kernel, arch, shape)
            compiled += not was_cached
            # Now it is cached, in memory and on disk.
            assert kdtree_jit.compile(kernel, arch, shape) is True
    stats = kdtree_jit.cache_stats()
    assert stats["compiles"] == compiled
    assert stats["compile_ms"] > 0 or compiled == 0


def test_compile_accepts_keywords():
    assert compile_or_skip("tree_accept", "sm_90", "N_MAX=33,L=7") in (True, False)
    assert kdtree_jit.compile("tree_accept", "sm_90", L=7, N_MAX=33) is True


def test_compile_with_no_shape_takes_the_default():
    shape = kdtree_jit.default_shape("tree_accept")
    compile_or_skip("tree_accept", "sm_120", shape)
    assert kdtree_jit.compile("tree_accept", "sm_120") is True


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
