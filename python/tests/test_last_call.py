"""The one checked path and its memory of the last call
(kdtree_jit._runtime's docstring): a call with the same arrays at the
same pointers and the same other arguments as the thread's last call of
the kernel skips the checks and the packing, whatever tuple holds its
outputs; whatever could make the kernel touch memory other than what was
checked -- another array, one whose storage moved, one that died, other
sizes -- is checked again, with the checks' own errors.

Host tests: CPU torch tensors stand in for CUDA ones on a runtime of
"device -1" (describe() patched, as overhead.py --stub does) whose NULL
handle makes the library refuse every launch (INVALID_ARGUMENT) after the
Python side is done; what the launch was given is read back from the
thread's argument buffer."""
import contextlib
import copy
import gc
import threading
import weakref

import pytest

import _util

torch = pytest.importorskip("torch")

import kdtree_jit  # noqa: E402
from kdtree_jit import _arrays, _runtime  # noqa: E402

R, L, K, N, V, H, PAGE, PAGES = 2, 5, 4, 17, 300, 8, 16, 4
i32 = torch.int32
KERNELS = dict((k.name, k) for k in _runtime._KERNELS)


@pytest.fixture(autouse=True)
def cpu_as_device():
    saved = _arrays.describe
    _arrays.describe = lambda x: (
        x.data_ptr(), tuple(x.shape), _arrays._dtype_name(x.dtype), -1,
        x.is_contiguous()) if isinstance(x, torch.Tensor) else saved(x)
    try:
        yield
    finally:
        _arrays.describe = saved


@contextlib.contextmanager
def checks_fail():
    """Every argument check raises AssertionError: a call that still
    reaches the library took the last call's path."""
    names = ("checked", "ptr", "first")
    saved = dict((n, getattr(_arrays, n)) for n in names)

    def checked_again(*args, **kwargs):
        raise AssertionError("checked again")
    for n in names:
        setattr(_arrays, n, checked_again)
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(_arrays, n, f)


def runtime():
    b = _util.binding()
    rt = kdtree_jit.Runtime.__new__(kdtree_jit.Runtime)
    rt._setup(b.ffi, b.lib, b.ffi.NULL, -1)
    return rt


def launched(call):
    """Runs a call that passes the Python side: the library refuses it."""
    with pytest.raises(kdtree_jit.KdtreeError, match="INVALID_ARGUMENT"):
        call()


def structs(rt, kernel):
    """The structs of `kernel` in this thread's argument buffer."""
    k = KERNELS[kernel]
    ptrs = rt._tls.last[k.index].buf.ptrs
    return [ptrs[name] for name, _ in k.structs]


def last_call(rt, kernel):
    return rt._tls.last[KERNELS[kernel].index].memo


def ptr(x):
    return 0 if x is None else x.data_ptr()


def new_tree():
    W = (N + 31) // 32
    return kdtree_jit.Tree(*([torch.zeros(R, dtype=i32)] +
                             [torch.zeros(R, N, dtype=i32) for _ in range(6)] +
                             [None, torch.zeros(R, N, W, dtype=i32)]))


class TreeCall(object):
    """build_ddtree on a runtime of its own with arguments it keeps
    (attributes: draft, budget, root_token, past_len, out), any of them
    replaced for one call by a keyword."""

    def __init__(self):
        self.rt = runtime()
        self.draft = kdtree_jit.Draft(torch.zeros(R, L, K),
                                      torch.zeros(R, L, K, dtype=i32))
        self.budget = torch.full((R,), N - 1, dtype=i32)
        self.root_token = torch.zeros(R, dtype=i32)
        self.past_len = torch.zeros(R, dtype=i32)
        self.out = new_tree()

    def __call__(self, **kw):
        args = dict(draft=self.draft, budget=self.budget,
                    root_token=self.root_token, n_max=N,
                    past_len=self.past_len, out=self.out, stream=0)
        args.update(kw)
        return self.rt.build_ddtree(**args)

    def launched(self, **kw):
        launched(lambda: self(**kw))

    def checked_again(self, **kw):
        with checks_fail():
            with pytest.raises(AssertionError, match="checked again"):
                self(**kw)

    def assert_buffer_holds_its_arguments(self):
        t = structs(self.rt, "build_ddtree")[0]
        for f, x in zip(kdtree_jit.Tree._fields, self.out):
            assert getattr(t, f) == ptr(x), f
        self.assert_buffer_holds_its_inputs()

    def assert_buffer_holds_its_inputs(self):
        t, d, q = structs(self.rt, "build_ddtree")
        assert (t.n_requests, t.n_max) == (R, N)
        assert (d.lp, d.ids) == (ptr(self.draft.lp), ptr(self.draft.ids))
        assert (d.n_requests, d.depth, d.k) == (R, L, K)
        assert (q.budget, q.root_token, q.depth_limit, q.past_len) == (
            ptr(self.budget), ptr(self.root_token), 0, ptr(self.past_len))


def test_a_repeated_call_is_not_checked_again_and_launches_the_same():
    call = TreeCall()
    call.launched()
    call.assert_buffer_holds_its_arguments()
    with checks_fail():
        call.launched()
        call.launched()
        # A new tuple of the same arrays, as a server passes its buffers,
        # a list, a shallow copy: the same arrays, the same call.
        call.launched(out=tuple(call.out))
        call.launched(out=list(call.out))
        call.launched(out=copy.copy(call.out))
    call.assert_buffer_holds_its_arguments()
    call.checked_again(out=copy.deepcopy(call.out))


def test_another_call_between_is_checked_and_packed_over():
    call = TreeCall()
    call.launched()
    call.launched(out=None)  # new outputs, packed into the buffer
    assert structs(call.rt, "build_ddtree")[0].token != ptr(call.out.token)
    call.checked_again()
    call.launched()
    call.assert_buffer_holds_its_arguments()
    with checks_fail():
        call.launched()


def test_moved_or_other_tensors_are_checked_again():
    call = TreeCall()
    call.launched()
    call.out.token.resize_(R, 2 * N)  # grows: new storage
    with pytest.raises(ValueError, match=r"build_ddtree: out.token must "
                                         r"have shape \[2, 17\], got "
                                         r"\[2, 34\]"):
        call()
    call.out = new_tree()
    call.launched()
    call.budget.set_(torch.zeros(1, dtype=i32))
    with pytest.raises(ValueError, match=r"budget must have shape \[2\], "
                                         r"got \[1\]"):
        call()
    call.budget = torch.full((R,), N - 1, dtype=i32)
    call.launched()
    # The same memory seen through another tensor is another argument.
    with pytest.raises(TypeError, match="build_ddtree: budget must be "
                                        "int32, got float32"):
        call(budget=call.budget.view(torch.float32))
    call.launched()
    with pytest.raises(TypeError, match="build_ddtree: n_max must be an "
                                        "int, got float"):
        call(n_max=float(N))
    call.launched()
    with pytest.raises(TypeError, match="root_token must be a CUDA array, "
                                        "got a NoneType"):
        call(root_token=None)
    call.launched()
    # Other sizes: another shape, checked.
    with pytest.raises(ValueError, match=r"out.token must have shape "
                                         r"\[2, 9\], got \[2, 17\]"):
        call(n_max=9)
    call.launched()
    call.checked_again(past_len=None)
    call.launched(past_len=None)
    q = structs(call.rt, "build_ddtree")[2]
    assert q.past_len == 0


def test_the_written_out_test_tells_every_slot():
    """_same_test's function, for each row shape: false when any one
    slot holds another object or any one array another pointer, or a
    reference whose array died meets None in its slot; true for the row
    it was made from."""
    _runtime._data_ptr = torch.Tensor.data_ptr
    for n in (1, 3, 15):
        for at in (tuple(range(n)), tuple(range(0, n, 2))):
            xs = tuple(torch.zeros(2) if i in at else None
                       for i in range(n))
            make, arrays = _runtime._same_test(xs)
            assert arrays(xs) == tuple(xs[i] for i in at)
            assert _runtime._same_test(xs) == (make, arrays)  # made once
            refs = [weakref.ref(x) for x in arrays(xs)]
            ptrs = [x.data_ptr() for x in arrays(xs)]
            same = make(refs, ptrs)
            assert same(xs)
            for i in range(n):
                other = xs[:i] + (torch.zeros(2),) + xs[i + 1:]
                assert not same(other)
            for j in range(len(at)):
                moved = ptrs[:j] + [ptrs[j] + 4] + ptrs[j + 1:]
                assert not make(refs, moved)(xs)
                dead = weakref.ref(torch.zeros(2))
                assert dead() is None
                gone = refs[:j] + [dead] + refs[j + 1:]
                assert not make(gone, ptrs)(
                    xs[:at[j]] + (None,) + xs[at[j] + 1:])


def test_a_row_with_other_arrays_has_no_test():
    """A row whose arrays are not all torch tensors is not remembered:
    _same_test gives None for it."""
    xs = (torch.zeros(2), _util.FakeArray((2,)), None)
    assert _runtime._same_test(xs) is None


def test_a_tensor_that_dies_forgets_the_call():
    call = TreeCall()
    call.launched()
    assert last_call(call.rt, "build_ddtree") is not None
    call.budget = None  # its weak reference's callback forgets the call
    gc.collect()
    assert last_call(call.rt, "build_ddtree") is None
    with pytest.raises(TypeError, match="budget must be a CUDA array, "
                                        "got a NoneType"):
        call()
    call.budget = torch.full((R,), N - 1, dtype=i32)
    call.checked_again()
    call.launched()
    call.assert_buffer_holds_its_arguments()


def test_the_runtime_keeps_no_array_alive():
    call = TreeCall()
    call.launched()
    gone = []
    import weakref
    w = weakref.ref(call.out.token, lambda r: gone.append(r))
    call.out = None
    gc.collect()
    assert gone and w() is None


def test_another_thread_has_a_buffer_and_a_last_call_of_its_own():
    call = TreeCall()
    errors = []

    def other():
        try:
            theirs = new_tree()
            for out in (theirs, theirs, None):
                call.launched(out=out)
            t, _, _ = structs(call.rt, "build_ddtree")
            assert t.token != ptr(call.out.token)
        except BaseException as e:  # reported by the main thread
            errors.append(e)
    call.launched()
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert not errors, errors
    call.assert_buffer_holds_its_arguments()
    with checks_fail():
        call.launched()
    call.assert_buffer_holds_its_arguments()


def test_an_allocating_call_checks_its_inputs_once():
    call = TreeCall()
    call.launched(out=None, want_score=True)
    with checks_fail():
        for _ in range(3):
            call.launched(out=None, want_score=True)
            t = structs(call.rt, "build_ddtree")[0]
            # Its new outputs' pointers packed, the inputs' kept.
            assert t.token != 0 and t.score != 0
            call.assert_buffer_holds_its_inputs()
    # Without score: another call (score's slot empty), checked.
    call.checked_again(out=None)
    call.launched(out=None)
    assert structs(call.rt, "build_ddtree")[0].score == 0


def test_every_kernel_remembers_its_call():
    rt = runtime()
    draft = kdtree_jit.Draft(torch.zeros(R, L, K),
                             torch.zeros(R, L, K, dtype=i32))
    past_len = torch.zeros(R, dtype=i32)
    tree = new_tree()
    logits = torch.zeros(R, L, V, dtype=torch.bfloat16)
    q = torch.zeros(R, N, H, 576, dtype=torch.bfloat16)
    kv = torch.zeros(R * PAGES, PAGE, 576, dtype=torch.bfloat16)
    table = torch.zeros(R, PAGES, dtype=i32)
    ws = torch.zeros(1024, dtype=torch.uint8)
    attn = kdtree_jit.Attn(torch.zeros(R, N, H, 512, dtype=torch.bfloat16),
                           torch.zeros(R, N, H))
    target = torch.zeros(R, N, dtype=i32)
    acc = kdtree_jit.Accept(torch.zeros(R, dtype=i32),
                            torch.zeros(R, L + 1, dtype=i32),
                            torch.zeros(R, L + 1, dtype=i32),
                            torch.zeros(R, dtype=i32))
    calls = [
        lambda: rt.draft_topk(logits, K, out=tuple(draft), stream=0),
        lambda: rt.verify_attn(q, kv, table, past_len, tree, 0.125,
                               workspace=ws, out=tuple(attn), stream=0),
        lambda: rt.tree_accept(tree, target, L, out=tuple(acc), stream=0)]
    for call in calls:
        launched(call)
    with checks_fail():
        for call in calls:
            launched(call)
    d, = structs(rt, "draft_topk")
    assert (d.lp, d.ids, d.n_requests, d.depth, d.k) == (
        ptr(draft.lp), ptr(draft.ids), R * L, 1, K)
    a, t, q_, k = structs(rt, "verify_attn")
    assert (a.q, a.o, a.lse, a.workspace, a.workspace_bytes, a.n_heads,
            a.scale, t.n_nodes, t.anc_mask, t.n_requests, t.n_max,
            q_.past_len, k.data, k.block_table, k.page_size,
            k.max_pages) == (
        ptr(q), ptr(attn.o), ptr(attn.lse), ptr(ws), 1024, H, 0.125,
        ptr(tree.n_nodes), ptr(tree.anc_mask), R, N, ptr(past_len), ptr(kv),
        ptr(table), PAGE, PAGES)
    a, t, q_ = structs(rt, "tree_accept")
    assert [getattr(a, f) for f in kdtree_jit.Accept._fields] == [
        ptr(x) for x in acc]
    assert (a.n_requests, a.depth) == (R, L)
    assert (t.n_nodes, t.token, t.first_child, t.next_sibling) == (
        ptr(tree.n_nodes), ptr(tree.token), ptr(tree.first_child),
        ptr(tree.next_sibling))
    # Anything else is checked again.
    with pytest.raises(ValueError, match=r"draft_topk: out.lp must have "
                                         r"shape \[2, 5, 3\]"):
        rt.draft_topk(logits, K - 1, out=draft, stream=0)
    with pytest.raises(TypeError, match="verify_attn: scale must be a "
                                        "float, got str"):
        rt.verify_attn(q, kv, table, past_len, tree, "0.125",
                       workspace=ws, out=attn, stream=0)
    launched(lambda: rt.verify_attn(q, kv, table, past_len, tree, 0.5,
                                    workspace=ws, out=attn, stream=0))
    assert structs(rt, "verify_attn")[0].scale == 0.5
    attn.lse.resize_(R, N, 2 * H)
    with pytest.raises(ValueError, match="verify_attn: out.lse must have "
                                         "shape"):
        calls[1]()
    tree.first_child.set_(torch.zeros(N, R, dtype=i32).t())
    with pytest.raises(ValueError, match="tree_accept: tree.first_child "
                                         "must be contiguous"):
        calls[2]()


def test_verify_attn_without_a_workspace_asks_its_size_after_the_checks():
    rt = runtime()
    q = torch.zeros(R, N, H, 576, dtype=torch.bfloat16)
    kv = torch.zeros(R * PAGES, PAGE, 576, dtype=torch.bfloat16)
    table = torch.zeros(R, PAGES, dtype=i32)
    past_len = torch.zeros(R, dtype=i32)
    tree = new_tree()
    with pytest.raises(ValueError, match=r"verify_attn: tree.anc_mask must "
                                         r"have shape \[2, 17, 1\]"):
        rt.verify_attn(q, kv, table, past_len,
                       tree._replace(anc_mask=tree.anc_mask[:, :1]), 0.1,
                       stream=0)
    # The NULL runtime refuses the size: no workspace is kept, each call
    # without one allocates one of the size the library gives.
    with pytest.raises(kdtree_jit.KdtreeError) as info:
        rt.verify_attn(q, kv, table, past_len, tree, 0.1, stream=0)
    assert info.value.function == "kdtree_verify_attn_workspace_size"
    ws = torch.zeros(64, dtype=torch.uint8)
    with pytest.raises(kdtree_jit.KdtreeError) as info:
        rt.verify_attn(q, kv, table, past_len, tree, 0.1, workspace=ws,
                       stream=0)
    assert info.value.function == "kdtree_verify_attn"
    a = structs(rt, "verify_attn")[0]
    assert (a.workspace, a.workspace_bytes) == (ptr(ws), 64)
    with pytest.raises(TypeError, match="verify_attn: workspace must be "
                                        "uint8, got int32"):
        rt.verify_attn(q, kv, table, past_len, tree, 0.1,
                       workspace=ws.view(i32), stream=0)


def test_a_bound_launch_packs_a_buffer_of_its_own():
    call = TreeCall()
    bound = call.rt.bind("build_ddtree", call.draft, call.budget,
                         call.root_token, N, past_len=call.past_len,
                         out=call.out)
    assert tuple(bound.result) == tuple(call.out)
    t, d, q = [bound._keep.ptrs[name] for name, _ in
               KERNELS["build_ddtree"].structs]
    assert (t.token, t.anc_mask, t.n_max, d.lp, q.past_len) == (
        ptr(call.out.token), ptr(call.out.anc_mask), N, ptr(call.draft.lp),
        ptr(call.past_len))
    # The thread's own buffer and last call are left as they were.
    assert last_call(call.rt, "build_ddtree") is None
    launched(lambda: bound(0))
    fresh = call.rt.bind("build_ddtree", call.draft, call.budget,
                         call.root_token, N)
    assert fresh.result.token is not None and fresh.result.score is None
    assert fresh._keep.ptrs["kdtree_tree"].token == ptr(fresh.result.token)


def test_a_bound_launch_keeps_the_workspace_it_allocated():
    rt = runtime()
    # The NULL runtime gives no workspace size: this one does.
    rt.verify_attn_workspace_size = lambda *args: 1024
    q = torch.zeros(R, N, H, 576, dtype=torch.bfloat16)
    kv = torch.zeros(R * PAGES, PAGE, 576, dtype=torch.bfloat16)
    table = torch.zeros(R, PAGES, dtype=i32)
    attn = kdtree_jit.Attn(torch.zeros(R, N, H, 512, dtype=torch.bfloat16),
                           torch.zeros(R, N, H))
    bound = rt.bind("verify_attn", q, kv, table, torch.zeros(R, dtype=i32),
                    new_tree(), 0.1, out=attn)
    assert tuple(bound.result) == tuple(attn)
    a = bound._keep.ptrs["kdtree_attn"]
    ws, = bound._arrays
    gc.collect()
    assert (a.workspace, a.workspace_bytes) == (ws.data_ptr(), 1024)
    assert ws.numel() == 1024 and ws.dtype == torch.uint8
