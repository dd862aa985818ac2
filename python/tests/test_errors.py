"""Every error path of the binding and its message.  Host tests: the
argument checks run against stand-in arrays and a runtime whose handle is
NULL, so nothing reaches a device."""
import pytest

import _util
import kdtree_jit
from _util import FakeArray as A


def rt():
    return _util.offline_runtime()


def T(token, first_child, next_sibling, n_nodes, anc_mask=None):
    """A tree holding the fields tree_accept and verify_attn read."""
    return kdtree_jit.Tree(n_nodes, token, None, None, None, first_child,
                           next_sibling, None, anc_mask)


def ta(r, token, first_child, next_sibling, n_nodes, target, **kw):
    return r.tree_accept(T(token, first_child, next_sibling, n_nodes),
                         target, **kw)


def bd(r, lp, ids, *args, **kw):
    return r.build_ddtree(kdtree_jit.Draft(lp, ids), *args, **kw)


def va(r, n_nodes, anc_mask, **kw):
    return r.verify_attn(tree=T(None, None, None, n_nodes, anc_mask), **kw)


# ---- library-level functions ----------------------------------------------

def test_kdtree_error_carries_status_name_and_detail():
    with pytest.raises(kdtree_jit.KdtreeError) as info:
        kdtree_jit.compile("no_such_kernel", "sm_90", N_MAX=65)
    e = info.value
    assert e.status == -4
    assert e.name == "KDTREE_ERROR_UNKNOWN_KERNEL"
    assert e.function == "kdtree_compile"
    assert "no_such_kernel" in e.detail
    assert str(e).startswith("kdtree_compile: KDTREE_ERROR_UNKNOWN_KERNEL: ")


def test_shape_outside_range_names_the_constant():
    with pytest.raises(kdtree_jit.KdtreeError,
                       match=r"KDTREE_ERROR_SHAPE: .*N_MAX.*1\.\.1025"):
        kdtree_jit.compile("tree_accept", "sm_90", N_MAX=5000, L=15)


def test_shape_that_does_not_parse():
    with pytest.raises(kdtree_jit.KdtreeError,
                       match="KDTREE_ERROR_SHAPE_STRING"):
        kdtree_jit.compile("tree_accept", "sm_90", "N_MAX=65,,L=")


def test_unknown_arch():
    with pytest.raises(kdtree_jit.KdtreeError, match="KDTREE_ERROR_ARCH"):
        kdtree_jit.compile("tree_accept", "sm_1", N_MAX=65, L=15)


def test_compile_argument_types():
    with pytest.raises(TypeError, match="not both"):
        kdtree_jit.compile("tree_accept", "sm_90", "N_MAX=65,L=15", L=15)
    with pytest.raises(TypeError, match="compile: kernel must be a str, got "
                                        "int"):
        kdtree_jit.compile(3, "sm_90", N_MAX=65, L=15)
    with pytest.raises(TypeError, match="compile: arch must be a str"):
        kdtree_jit.compile("tree_accept", None, N_MAX=65, L=15)
    with pytest.raises(TypeError, match="compile: shape must be a str"):
        kdtree_jit.compile("tree_accept", "sm_90", 65)


def test_strings_with_nul_are_refused():
    # C would read "tree_accept" and never see the rest.
    with pytest.raises(ValueError, match="compile: kernel must not contain "
                                         "a NUL"):
        kdtree_jit.compile("tree_accept\x00junk", "sm_90", N_MAX=65, L=15)
    with pytest.raises(ValueError, match="compile: arch must not contain"):
        kdtree_jit.compile("tree_accept", "sm_90\x00a", N_MAX=65, L=15)
    with pytest.raises(ValueError, match="compile: shape must not contain"):
        kdtree_jit.compile("tree_accept", "sm_90", "N_MAX=65,L=15\x00,L=3")
    with pytest.raises(ValueError, match="kernel_constants: kernel must not"):
        kdtree_jit.kernel_constants("tree_accept\x00")
    with pytest.raises(ValueError, match="default_shape: kernel must not"):
        kdtree_jit.default_shape("tree_accept\x00")
    with pytest.raises(ValueError, match="prepare: kernel must not contain"):
        rt().prepare("tree_accept\x00junk", N_MAX=65, L=15)


def test_unknown_kernel_in_queries():
    with pytest.raises(ValueError, match="no kernel named 'nope'; there are "
                                         "draft_topk, build_ddtree"):
        kdtree_jit.kernel_constants("nope")
    with pytest.raises(ValueError, match="no kernel named"):
        kdtree_jit.default_shape("nope")
    with pytest.raises(TypeError, match="kernel must be a str"):
        kdtree_jit.default_shape(None)


def test_runtime_without_a_device():
    if _util.gpu_runtime() is not None:
        pytest.skip("a GPU is present")
    with pytest.raises(kdtree_jit.KdtreeError) as info:
        kdtree_jit.Runtime(0)
    assert info.value.name in ("KDTREE_ERROR_NO_DRIVER",
                               "KDTREE_ERROR_NO_DEVICE", "KDTREE_ERROR_CUDA")
    assert info.value.detail


def test_runtime_device_type():
    with pytest.raises(TypeError, match="Runtime: device must be an int or "
                                        "a torch.device, got float"):
        kdtree_jit.Runtime(1.5)
    with pytest.raises(TypeError, match="Runtime: device must be an int"):
        kdtree_jit.Runtime(True)


def test_runtime_takes_a_torch_device():
    torch = pytest.importorskip("torch")
    from kdtree_jit._runtime import device_ordinal
    assert device_ordinal("Runtime", torch.device("cuda", 3)) == 3
    assert device_ordinal("Runtime", "cuda:2") == 2
    assert device_ordinal("Runtime", 1) == 1
    with pytest.raises(ValueError, match="Runtime: device must be a CUDA "
                                         "device, got cpu"):
        kdtree_jit.Runtime(torch.device("cpu"))
    with pytest.raises(ValueError, match="Runtime: device 'gpu0' is not a "
                                         "device"):
        kdtree_jit.Runtime("gpu0")
    if _util.gpu_runtime() is None:
        # Past the argument, the library is asked (and finds no device).
        with pytest.raises(kdtree_jit.KdtreeError,
                           match="kdtree_runtime_create"):
            kdtree_jit.Runtime(torch.device("cuda", 0))


def test_closed_runtime():
    r = rt()
    r._rt = None
    with pytest.raises(ValueError, match="the runtime was closed"):
        r.prepare("tree_accept", N_MAX=65, L=15)


def test_null_runtime_reaches_the_library_and_is_refused():
    # Everything Python checks is right; the library must refuse the NULL
    # runtime itself, naming it.
    r = rt()
    N, L = 65, 15
    with pytest.raises(kdtree_jit.KdtreeError,
                       match="KDTREE_ERROR_INVALID_ARGUMENT") as info:
        ta(r, A((2, N)), A((2, N)), A((2, N)), A((2,)), A((2, N)),
                      L=L, out=(A((2,)), A((2, L + 1)), A((2, L + 1)),
                                A((2,))), stream=0)
    assert info.value.function == "kdtree_tree_accept"


# ---- array checks -----------------------------------------------------------

def test_not_an_array():
    with pytest.raises(TypeError, match=r"tree_accept: tree.token must be a CUDA "
                                        r"array, got a list, not a CUDA "
                                        r"tensor or an object with "
                                        r"__cuda_array_interface__"):
        ta(rt(), [1, 2], A((1, 3)), A((1, 3)), A((1,)), A((1, 3)),
                         L=2, stream=0)


def test_wrong_dtype():
    with pytest.raises(TypeError, match="tree_accept: target must be int32, "
                                        "got float32"):
        ta(rt(), A((1, 3)), A((1, 3)), A((1, 3)), A((1,)),
                         A((1, 3), "<f4"), L=2, stream=0)
    with pytest.raises(TypeError, match="draft_topk: logits must be float32 "
                                        "or bfloat16, got int32"):
        rt().draft_topk(A((4, 100)), k=8, stream=0)
    with pytest.raises(TypeError, match="got float64"):
        rt().draft_topk(A((4, 100), "<f8"), k=8, stream=0)
    with pytest.raises(TypeError, match="tree_accept: target must be int32, "
                                        "got int64"):
        ta(rt(), A((1, 3)), A((1, 3)), A((1, 3)), A((1,)), A((1, 3), "<i8"),
           L=2, stream=0)


def test_wrong_shape():
    with pytest.raises(ValueError, match=r"tree_accept: tree.first_child must have "
                                         r"shape \[2, 65\], got \[2, 64\]"):
        ta(rt(), A((2, 65)), A((2, 64)), A((2, 65)), A((2,)),
                         A((2, 65)), L=15, stream=0)
    with pytest.raises(ValueError, match=r"tree.n_nodes must have shape \[2\], "
                                         r"got \[3\]"):
        ta(rt(), A((2, 65)), A((2, 65)), A((2, 65)), A((3,)),
                         A((2, 65)), L=15, stream=0)
    with pytest.raises(ValueError, match=r"tree.token must have shape \[\?, \?\]"):
        ta(rt(), A((65,)), A((65,)), A((65,)), A((1,)), A((65,)),
                         L=15, stream=0)
    with pytest.raises(ValueError, match=r"draft_topk: logits must have "
                                         r"shape \[\.\.\., V\]"):
        rt().draft_topk(A((100,), "<f4"), k=8, stream=0)


def test_not_contiguous():
    # [2, 65] int32 with a row stride of 66 elements: a slice.
    with pytest.raises(ValueError, match="tree.next_sibling must be contiguous"):
        ta(rt(), A((2, 65)), A((2, 65)),
                         A((2, 65), strides=(66 * 4, 4)), A((2,)),
                         A((2, 65)), L=15, stream=0)


def test_contiguous_strides_are_accepted():
    # Explicit C strides are as good as none; the NULL runtime then stops it.
    with pytest.raises(kdtree_jit.KdtreeError, match="INVALID_ARGUMENT"):
        ta(rt(), A((2, 65), strides=(65 * 4, 4)), A((2, 65)),
                         A((2, 65)), A((2,)), A((2, 65)), L=15,
                         out=(A((2,)), A((2, 16)), A((2, 16)), A((2,))),
                         stream=0)


def test_wrong_device():
    class OnDevice1(A):
        class device(object):
            id = 1
    with pytest.raises(ValueError, match="tree_accept: tree.token is on CUDA "
                                         "device 1, the runtime on 0"):
        ta(rt(), OnDevice1((1, 3)), A((1, 3)), A((1, 3)), A((1,)),
                         A((1, 3)), L=2, stream=0)


def test_out_checks():
    with pytest.raises(TypeError, match=r"tree_accept: out must be a tuple "
                                        r"of 4 arrays \(accept_len, "
                                        r"accept_idx, accept_token, bonus\)"):
        ta(rt(), A((1, 3)), A((1, 3)), A((1, 3)), A((1,)),
                         A((1, 3)), L=2, out=(A((1,)),), stream=0)
    with pytest.raises(ValueError, match=r"out.accept_idx must have shape "
                                         r"\[1, 3\], got \[1, 2\]"):
        ta(rt(), A((1, 3)), A((1, 3)), A((1, 3)), A((1,)),
                         A((1, 3)), L=2,
                         out=(A((1,)), A((1, 2)), A((1, 3)), A((1,))),
                         stream=0)
    with pytest.raises(TypeError, match="out.lp must be float32"):
        rt().draft_topk(A((4, 100), "<f4"), k=8,
                        out=(A((4, 8)), A((4, 8))), stream=0)


def test_int_arguments():
    with pytest.raises(TypeError, match="tree_accept: L must be an int, "
                                        "got float"):
        ta(rt(), A((1, 3)), A((1, 3)), A((1, 3)), A((1,)),
                         A((1, 3)), L=2.0, stream=0)
    with pytest.raises(TypeError, match="draft_topk: k must be an int"):
        rt().draft_topk(A((4, 100), "<f4"), k="8", stream=0)
    with pytest.raises(TypeError, match="build_ddtree: n_max must be an int"):
        bd(rt(), A((1, 15, 8), "<f4"), A((1, 15, 8)), A((1,)),
                          A((1,)), n_max=None, stream=0)


def test_stream_types():
    with pytest.raises(TypeError, match="stream must be None, an int handle"):
        ta(rt(), A((1, 3)), A((1, 3)), A((1, 3)), A((1,)),
                         A((1, 3)), L=2,
                         out=(A((1,)), A((1, 3)), A((1, 3)), A((1,))),
                         stream="default")


def test_build_ddtree_checks():
    r = rt()
    with pytest.raises(ValueError, match=r"build_ddtree: draft.ids must have shape "
                                         r"\[2, 15, 8\], got \[2, 15, 4\]"):
        bd(r, A((2, 15, 8), "<f4"), A((2, 15, 4)), A((2,)), A((2,)),
                       n_max=65, stream=0)
    with pytest.raises(ValueError, match=r"build_ddtree: draft.lp must have shape "
                                         r"\[\?, \?, \?\], got \[30, 8\]"):
        bd(r, A((30, 8), "<f4"), A((30, 8)), A((2,)), A((2,)),
                       n_max=65, stream=0)
    with pytest.raises(ValueError, match="past_len must have shape"):
        bd(r, A((2, 15, 8), "<f4"), A((2, 15, 8)), A((2,)), A((2,)),
                       n_max=65, past_len=A((1,)), stream=0)
    with pytest.raises(TypeError, match="out.anc_mask must be int32 or uint32"):
        W = 3
        bd(r, A((2, 15, 8), "<f4"), A((2, 15, 8)), A((2,)), A((2,)),
                       n_max=65, stream=0,
                       out=(A((2,)),) + (A((2, 65)),) * 6 + (None,) +
                           (A((2, 65, W), "<f4"),))


def test_verify_attn_checks():
    r = rt()
    bf = "<u2"  # bf16 storage through __cuda_array_interface__
    R, N, H, P = 1, 65, 8, 64
    args = dict(q=A((R, N, H, 576), bf), kv_cache=A((10, P, 576), bf),
                block_table=A((R, 10)), past_len=A((R,)), n_nodes=A((R,)),
                anc_mask=A((R, N, 3)), scale=0.1, stream=0)
    with pytest.raises(TypeError, match="scale must be a float"):
        va(r, **dict(args, scale="0.1"))
    with pytest.raises(ValueError, match=r"q must have shape "
                                         r"\[\?, \?, \?, 576\], got "
                                         r"\[1, 65, 8, 512\]"):
        va(r, **dict(args, q=A((R, N, H, 512), bf)))
    with pytest.raises(TypeError, match="kv_cache must be bfloat16 or "
                                        "float8_e4m3fn or uint8, got "
                                        "float32"):
        va(r, **dict(args, kv_cache=A((10, P, 576), "<f4")))
    with pytest.raises(ValueError, match="math must be 'bf16' or 'e4m3', "
                                         "got 'fp8'"):
        va(r, **dict(args, math="fp8"))
    with pytest.raises(ValueError, match="math must be"):
        va(r, **dict(args, math=1))
    with pytest.raises(TypeError, match="kv_scale must be a float, got str"):
        va(r, **dict(args, kv_scale="1"))
    with pytest.raises(TypeError, match="kv_scale must be a float, got bool"):
        va(r, **dict(args, kv_scale=True))
    with pytest.raises(ValueError, match=r"tree.anc_mask must have shape "
                                         r"\[1, 65, 3\]"):
        va(r, **dict(args, anc_mask=A((R, N, 2))))
    with pytest.raises(ValueError, match=r"block_table must have shape "
                                         r"\[1, \?\]"):
        va(r, **dict(args, block_table=A((2, 10))))
    with pytest.raises(TypeError, match="workspace must be uint8"):
        va(r, **dict(args, workspace=A((64,), "<f4"),
                             out=(A((R, N, H, 512), bf), None),
                             want_lse=False))


def test_verify_attn_packs_the_cache_type_and_the_arithmetic():
    """What reaches the library: kv->dtype from the cache's element type,
    kv->scale and attn->math from the arguments (the library's own checks
    of them are tests/test_api.c's)."""
    r = rt()
    bf = "<u2"
    R, N, H, P = 1, 65, 8, 64
    args = dict(q=A((R, N, H, 576), bf), block_table=A((R, 10)),
                past_len=A((R,)), n_nodes=A((R,)), anc_mask=A((R, N, 3)),
                scale=0.1, workspace=A((64,), "|u1"),
                out=(A((R, N, H, 512), bf), None), want_lse=False)
    for kv, kv_scale, math, want in (
            (A((10, P, 576), bf), 1.0, "bf16", (0, 1.0, 0)),
            (A((10, P, 576), "|u1"), 0.5, "bf16", (1, 0.5, 0)),
            (A((10, P, 576), "|u1"), 2, "e4m3", (1, 2.0, 1))):
        b = r.bind("verify_attn", tree=T(None, None, None, args["n_nodes"],
                                         args["anc_mask"]),
                   kv_cache=kv, kv_scale=kv_scale, math=math,
                   **dict((k, v) for k, v in args.items()
                          if k not in ("n_nodes", "anc_mask")))
        attn, kvc = b._args[1], b._args[4]
        assert (kvc.dtype, kvc.scale, attn.math) == want
        assert attn.scale == pytest.approx(0.1) and kvc.page_size == P


def test_prepare_argument_errors():
    r = rt()
    with pytest.raises(TypeError, match="prepare: kernel must be a str"):
        r.prepare(None, N_MAX=65, L=15)
    with pytest.raises(kdtree_jit.KdtreeError,
                       match="kdtree_prepare: KDTREE_ERROR_INVALID_ARGUMENT"):
        r.prepare("tree_accept", N_MAX=65, L=15)


def test_bind_checks_once_and_launch_reaches_the_library():
    r = rt()
    with pytest.raises(ValueError, match="bind: no kernel named 'nope'"):
        r.bind("nope")
    with pytest.raises(TypeError, match="give the stream when calling"):
        r.bind("tree_accept", T(A((1, 3)), A((1, 3)), A((1, 3)), A((1,))),
               A((1, 3)), L=2, stream=0)
    with pytest.raises(ValueError, match="target must have shape"):
        r.bind("tree_accept", T(A((1, 3)), A((1, 3)), A((1, 3)), A((1,))),
               A((1, 4)), L=2)
    out = (A((1,)), A((1, 3)), A((1, 3)), A((1,)))
    b = r.bind("tree_accept", T(A((1, 3)), A((1, 3)), A((1, 3)), A((1,))),
               A((1, 3)), L=2, out=out)
    assert isinstance(b, kdtree_jit.Bound) and tuple(b.result) == out
    with pytest.raises(kdtree_jit.KdtreeError,
                       match="kdtree_tree_accept: KDTREE_ERROR_INVALID_ARGUMENT"):
        b(stream=0)
    r._rt = None
    with pytest.raises(ValueError, match="the runtime was closed"):
        b(stream=0)


# ---- torch tensors (CPU torch is enough for these) -------------------------

def test_cpu_tensor_is_a_type_error_naming_the_argument():
    torch = pytest.importorskip("torch")
    z = torch.zeros(2, 65, dtype=torch.int32)
    with pytest.raises(TypeError, match="tree_accept: target must be a CUDA "
                                        "array, got a tensor on cpu"):
        ta(rt(), A((2, 65)), A((2, 65)), A((2, 65)), A((2,)), z, L=15,
           stream=0)
    with pytest.raises(TypeError, match="build_ddtree: budget must be a CUDA "
                                        "array, got a tensor on cpu"):
        bd(rt(), A((2, 15, 8), "<f4"), A((2, 15, 8)), z[:, 0], A((2,)),
           n_max=65, stream=0)
