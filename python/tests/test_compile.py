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
