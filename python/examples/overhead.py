#!/usr/bin/env python3
"""Host time of one kernel call through Python, per kernel, beside the raw
cffi call of the same C function with the same (prebuilt) structs and
beside torch's own cost of an op registered the way kdtree's are:

    raw        lib.kdtree_<kernel>(rt, structs..., stream): the floor
    checked    Runtime.<kernel>(..., out=(...)): the outputs (and
               verify_attn's workspace) given, as a new plain tuple each
               call, the arrays the same: the Runtime's checked path
               (kdtree_jit._runtime: a call like the thread's last one
               skips the checks)
    out=       the same with out= the namedtuple an earlier call returned
    alloc      Runtime.<kernel>(...): outputs (and verify_attn's
               workspace) allocated, one torch.empty each
    bound      Runtime.bind(...)(): checked once
    op_out     torch.ops.kdtree.<kernel>_out(...) (import kdtree_jit.torch)
    op         torch.ops.kdtree.<kernel>(...): allocates its outputs
    torch_out  an op of <kernel>_out's schema registered the same way
               (torch.library.Library FRAGMENT, impl for the device) whose
               body does nothing: what torch's dispatcher costs alone
    torch_op   the same for <kernel>'s schema, its body allocating the
               outputs (one torch.empty each) and nothing else

The last columns are what is ours: checked, op_out and op less raw; and
op_out less torch_out, op less torch_op: what the ops add to torch's
dispatch (and, for op, to its allocations).
The GPU must never hold the host back, or a column shows the kernel's time
instead of the host's.  Each round of calls starts on an idle GPU, and 500
calls a round (the default) stay well inside the queue of launches a
stream holds, so a kernel longer than its launch only falls behind: with
2,000 a round, build_ddtree's (about 6.5 us at R=8 on an H100, twice its
launch) filled the queue and paced raw, checked and bound alike.  The
shapes are small besides (draft_topk over a small vocabulary, verify_attn
over one request with a short past); the table names each row's shape.
The last line says what one torch.empty costs, which is what an allocating
call adds per output.

No timing is asserted anywhere; this prints them.  On a GPU host, from the
installed wheel:

    python3 python/examples/overhead.py [--requests 8] [--calls 500]
        [--json out.json]
    python3 python/examples/overhead.py --stub    # no GPU: CPU tensors and
        # a stub libkdtree (cc-built, every kernel returns 0), the ops and
        # the empty ones registered for the CPU: the Python side alone, for
        # profiling where there is no device
    python3 python/examples/overhead.py --schemas [--stub]

--schemas prints instead what torch's dispatch of an empty op costs by
the features of its schema and registration (SCHEMA_ROWS): the number of
tensors, scalars, optional tensors, keyword arguments, mutation marks,
the results, the dispatch key, the fake implementation, an Autograd
fallthrough, calling the packet or the OpOverload, and torch's PyObject
dispatch (OpOverload._enable_pyobj_dispatch, torch 2.15) where torch has
it.  It needs no libkdtree; with --stub its tensors are on the CPU.
"""
import argparse
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import kdtree_jit  # noqa: F401  (installed: measure that one)
except ImportError:
    sys.path.insert(0, os.path.dirname(HERE))  # python/ of a checkout

STUB_C = r"""
#include <stdint.h>
int32_t kdtree_abi_version(void) { return %d; }
const char *kdtree_status_name(int32_t s) { return "KDTREE_OK"; }
const char *kdtree_last_error(void) { return ""; }
const char *kdtree_version_string(void) { return "stub"; }
int32_t kdtree_set_site_packages(const char *d) { return 0; }
int32_t kdtree_draft_topk(void *rt, const void *d, uint64_t l, int32_t t,
                          int32_t v, void *s) { return 0; }
int32_t kdtree_build_ddtree(void *rt, const void *t, const void *d,
                            const void *r, void *s) { return 0; }
int32_t kdtree_verify_attn(void *rt, const void *a, const void *t,
                           const void *r, const void *k, void *s)
{ return 0; }
int32_t kdtree_verify_attn_workspace_size(uint64_t *o, void *rt,
                                          const void *a, const void *t,
                                          const void *k)
{ *o = 4096; return 0; }
int32_t kdtree_tree_accept(void *rt, const void *a, const void *t,
                           uint64_t g, const void *r, void *s) { return 0; }
"""

KERNELS = ("draft_topk", "build_ddtree", "verify_attn", "tree_accept")
COLUMNS = ("raw", "checked", "out=", "alloc", "bound", "op_out", "op",
           "torch_out", "torch_op")


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def per_call_us(fn, calls, reps, sync, clock=time.perf_counter):
    per = []
    for _ in range(reps):
        sync()
        t0 = clock()
        for _ in range(calls):
            fn()
        per.append((clock() - t0) / calls * 1e6)
    sync()
    return min(per) if clock is not time.perf_counter else median(per)


def stub_library():
    from kdtree_jit import _lib
    d = tempfile.mkdtemp(prefix="kdtree-stub.")
    # a loaded library outlives its file: the directory goes at exit
    atexit.register(shutil.rmtree, d, True)
    src, so = os.path.join(d, "stub.c"), os.path.join(d, "libkdtree.so")
    with open(src, "w") as f:
        f.write(STUB_C % _lib.EXPECTED_ABI)
    subprocess.check_call([os.environ.get("CC", "cc"), "-O2", "-shared",
                           "-fPIC", src, "-o", so])
    return so


def empty_ops(torch, key, outputs):
    """torch.ops.kdtree_overhead.<op> for every kdtree op: the same schema,
    registered the same way for dispatch key `key`, a body that does
    nothing but, in a functional op, allocate outputs like outputs[<op>]
    (one torch.empty each, as kdtree's own do)."""
    from kdtree_jit.torch import SCHEMAS
    lib = torch.library.Library("kdtree_overhead", "FRAGMENT")
    E = torch.empty

    def functional(made):
        def body(*args):
            return tuple(E(*s, dtype=t, device=d) for s, t, d in made)
        return body
    for name, schema in SCHEMAS.items():
        lib.define(schema)
        if name.endswith("_out"):
            lib.impl(name, lambda *args: None, key)
        else:
            lib.impl(name, functional([(tuple(x.shape), x.dtype, x.device)
                                       for x in outputs[name]]), key)
    return lib, torch.ops.kdtree_overhead


# --schemas: (label, schema, how it is registered, how it is called).
# Registration: "key" the dispatch key of the body (default: the
# device's), "fake" (default True), "autograd" ("fallthrough"), "pyobj"
# (torch's PyObject dispatch on the OpOverload); "call": "packet"
# (torch.ops.ns.f, the default) or "overload" (torch.ops.ns.f.default);
# "args": the call's arguments, "T" a tensor of the device; "kwargs".
_BD = "build_ddtree_out"  # its schema (kdtree_jit.torch.SCHEMAS)
_BD_ARGS = ("T",) * 4 + (65, None, "T") + ("T",) * 9
_ALL_T = ("f(Tensor a0, Tensor a1, Tensor a2, Tensor a3, Tensor a4, "
          "Tensor a5, Tensor(a!) o0, Tensor(b!) o1, Tensor(c!) o2, "
          "Tensor(d!) o3, Tensor(e!) o4, Tensor(f!) o5, Tensor(g!) o6, "
          "Tensor(h!) o7, Tensor(i!) o8) -> ()")


def _tensors(n):
    return ", ".join("Tensor a%d" % i for i in range(n))


SCHEMA_ROWS = (
    ("1 Tensor -> ()", "f(Tensor a0) -> ()", {}, ("T",)),
    ("4 Tensor", "f(%s) -> ()" % _tensors(4), {}, ("T",) * 4),
    ("16 Tensor", "f(%s) -> ()" % _tensors(16), {}, ("T",) * 16),
    ("8 Tensor, none marked", "f(%s) -> ()" % _tensors(8), {}, ("T",) * 8),
    ("8 Tensor, all Tensor(x!)", "f(%s) -> ()" % ", ".join(
        "Tensor(%s!) a%d" % (chr(97 + i), i) for i in range(8)), {},
     ("T",) * 8),
    ("1 Tensor + int", "f(Tensor a0, int n) -> ()", {}, ("T", 3)),
    ("1 Tensor + 8 int", "f(Tensor a0, %s) -> ()" % ", ".join(
        "int n%d" % i for i in range(8)), {}, ("T",) + (3,) * 8),
    ("1 Tensor + float", "f(Tensor a0, float s) -> ()", {}, ("T", 0.5)),
    ("1 Tensor + str", "f(Tensor a0, str m) -> ()", {}, ("T", "bf16")),
    ("1 Tensor + Tensor? None", "f(Tensor a0, Tensor? b) -> ()", {},
     ("T", None)),
    ("1 Tensor + Tensor? given", "f(Tensor a0, Tensor? b) -> ()", {},
     ("T", "T")),
    ("1 Tensor, *, float, str: omitted",
     "f(Tensor a0, *, float s=1., str m=\"bf16\") -> ()", {}, ("T",)),
    ("1 Tensor, *, float, str: by name",
     "f(Tensor a0, *, float s=1., str m=\"bf16\") -> ()",
     {"kwargs": {"s": 0.5, "m": "e4m3"}}, ("T",)),
    ("1 Tensor, float, str: positional",
     "f(Tensor a0, float s=1., str m=\"bf16\") -> ()", {},
     ("T", 0.5, "e4m3")),
    ("1 Tensor -> Tensor", "f(Tensor a0) -> Tensor", {"ret": 1}, ("T",)),
    ("1 Tensor -> 4 Tensor", "f(Tensor a0) -> (Tensor, Tensor, Tensor, "
     "Tensor)", {"ret": 4}, ("T",)),
    ("build_ddtree_out", _BD, {}, _BD_ARGS),
    ("  impl CompositeExplicitAutograd", _BD,
     {"key": "CompositeExplicitAutograd"}, _BD_ARGS),
    ("  no register_fake", _BD, {"fake": False}, _BD_ARGS),
    ("  + Autograd fallthrough", _BD, {"autograd": "fallthrough"},
     _BD_ARGS),
    ("  called as .default", _BD, {"call": "overload"}, _BD_ARGS),
    ("  under torch.inference_mode", _BD, {"inference": True}, _BD_ARGS),
    ("  outputs as one Tensor(a!)[]", _BD, {"list": 9}, _BD_ARGS),
    ("15 Tensor (its tensors, no scalar)", _ALL_T, {}, ("T",) * 15),
    ("  called as .default", _ALL_T, {"call": "overload"}, ("T",) * 15),
    ("  + pyobj dispatch, .default", _ALL_T,
     {"pyobj": True, "call": "overload"}, ("T",) * 15),
    ("  + pyobj + Autograd fallthrough", _ALL_T,
     {"pyobj": True, "autograd": "fallthrough"}, ("T",) * 15),
    ("  + pyobj + Autograd fallthrough, .default", _ALL_T,
     {"pyobj": True, "autograd": "fallthrough", "call": "overload"},
     ("T",) * 15),
    ("build_ddtree_out + the same, .default", _BD,
     {"pyobj": True, "autograd": "fallthrough", "call": "overload"},
     _BD_ARGS),
    ("build_ddtree_out by torch.library.custom_op", _BD,
     {"custom_op": True}, _BD_ARGS),
)


def schema_costs(torch, dev, key, calls, reps, clock):
    """[(label, median, best)] of SCHEMA_ROWS, us per call, or None where
    this torch lacks what the row needs; the rows timed in turn, `reps`
    rounds of `calls` calls each."""
    from kdtree_jit.torch import SCHEMAS
    lib = torch.library.Library("kdtree_schemas", "FRAGMENT")
    ops = torch.ops.kdtree_schemas
    has_pyobj = hasattr(torch._ops.OpOverload, "_enable_pyobj_dispatch")
    pool = [torch.zeros(8, 65, dtype=torch.int32, device=dev)
            for _ in range(16)]
    rows = []
    for i, (label, schema, how, args) in enumerate(SCHEMA_ROWS):
        if how.get("pyobj") and not has_pyobj:
            rows.append((label, None))
            continue
        it = iter(pool)
        args = tuple(next(it) if x == "T" else x for x in args)
        schema = SCHEMAS.get(schema, schema)
        if how.get("list"):  # the last outputs as one list
            n = how["list"]
            schema = schema.split(", Tensor(a!) ")[0] + \
                ", Tensor(a!)[] out) -> ()"
            args = args[:-n] + (list(args[-n:]),)
        name = "f%d" % i
        schema = schema[schema.index("("):]
        if how.get("custom_op"):  # its own registration, its defaults
            torch.library.custom_op(
                "kdtree_schemas::" + name, lambda *a: None, schema=schema,
                mutates_args=re.findall(r"Tensor\(\w!\) (\w+)", schema))
            rows.append((label, (lambda op=getattr(ops, name), a=args:
                                 op(*a)), False))
            continue
        lib.define(name + schema)
        ret = how.get("ret")
        body = (lambda *a, **k: None) if ret is None else \
            (lambda *a, r=(pool[0] if ret == 1 else (pool[0],) * ret), **k:
             r)
        lib.impl(name, body, how.get("key", key))
        if how.get("autograd") == "fallthrough":
            lib.impl(name, torch.library.fallthrough_kernel, "Autograd")
        if how.get("fake", True):
            fake = (lambda *a, **k: None) if ret is None else \
                (lambda a0, *a, n=ret, **k: a0.new_empty(a0.shape) if n == 1
                 else tuple(a0.new_empty(a0.shape) for _ in range(n)))
            torch.library.register_fake("kdtree_schemas::" + name, fake,
                                        lib=lib)
        op = getattr(ops, name)
        if how.get("pyobj"):
            op.default._enable_pyobj_dispatch(True)
        if how.get("call") == "overload":
            op = op.default
        kw = how.get("kwargs", {})
        rows.append((label, (lambda op=op, a=args, k=kw: op(*a, **k)),
                     how.get("inference")))
    times = [[] for r in rows]
    for _ in range(reps):
        for r, t in zip(rows, times):
            if r[1] is None:
                continue
            fn, inference = r[1:]
            with torch.inference_mode(bool(inference)):
                for _ in range(calls // 20):
                    fn()
                t0 = clock()
                for _ in range(calls):
                    fn()
                t.append((clock() - t0) / calls * 1e6)
    return [(r[0], median(t), min(t)) if t else (r[0], None, None)
            for r, t in zip(rows, times)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=8, help="R")
    ap.add_argument("--depth", type=int, default=15, help="L")
    ap.add_argument("--topk", type=int, default=8, help="K")
    ap.add_argument("--budget", type=int, default=64, help="N_MAX - 1")
    ap.add_argument("--vocab", type=int, default=4096,
                    help="draft_topk's V (163840 takes the H200 longer to "
                    "read than a launch takes)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--attn-requests", type=int, default=1,
                    help="verify_attn's R")
    ap.add_argument("--past", type=int, default=64,
                    help="verify_attn's past_len")
    ap.add_argument("--page", type=int, default=64)
    ap.add_argument("--calls", type=int, default=None,
                    help="calls a round (default 500 on a GPU: see above; "
                    "2000 with --stub)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--stub", action="store_true",
                    help="CPU tensors and a stub library (no GPU)")
    ap.add_argument("--schemas", action="store_true",
                    help="torch's dispatch of empty ops by schema feature")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.calls is None:
        a.calls = 2000 if a.stub else 500
    if a.calls < 1:
        ap.error("--calls must be at least 1")
    if a.schemas:
        return print_schema_costs(a)
    if a.stub:
        os.environ["KDTREE_LIBRARY"] = stub_library()
    import torch
    import kdtree_jit
    import kdtree_jit.torch as kt
    from kdtree_jit import _lib

    R, L, K, N, V, H = (a.requests, a.depth, a.topk, a.budget + 1, a.vocab,
                        a.heads)
    RA = a.attn_requests
    if a.stub:
        # Device -1 is what a CPU tensor reports: every check runs as for
        # a GPU; the stub's kernels do nothing.
        b = _lib.load()
        rt = kdtree_jit.Runtime.__new__(kdtree_jit.Runtime)
        rt._setup(b.ffi, b.lib, b.ffi.cast("kdtree_runtime *", 1), -1)
        kt._runtimes[-1] = rt  # the ops' runtime for CPU tensors
        dev, key = torch.device("cpu"), "CPU"

        def sync():
            pass
        import kdtree_jit._arrays as arrays
        arrays.current_stream = arrays._raw_stream = lambda device: 0
        # The checks refuse CPU tensors on their first sight (is_cuda);
        # here they pass as "device -1", and every later call takes the
        # same path as on a GPU.
        arrays.describe = lambda x: (x.data_ptr(), tuple(x.shape),
                                     arrays._dtype_name(x.dtype), -1,
                                     x.is_contiguous())
    else:
        if not torch.cuda.is_available():
            print("overhead: needs a CUDA device (or --stub)",
                  file=sys.stderr)
            return 77
        rt = kt.runtime()
        dev, key = torch.device("cuda", rt.device), "CUDA"
        sync = torch.cuda.synchronize
        rt.prepare("draft_topk", V=V, K=K, DTYPE="bf16")
        rt.prepare("build_ddtree", L=L, K=K, N_MAX=N)
        rt.prepare("verify_attn", H=H, PAGE=a.page, N_MAX=N)
        rt.prepare("tree_accept", N_MAX=N, L=L)
    ffi, lib = rt._ffi, rt._lib
    i32 = dict(dtype=torch.int32, device=dev)
    logits = torch.randn(R, L, V, device=dev).to(torch.bfloat16)
    budget = torch.full((R,), N - 1, **i32)
    root = torch.full((R,), 3, **i32)
    past_len = torch.full((R,), a.past, **i32)
    draft = rt.draft_topk(logits, K)
    if a.stub:
        draft.lp.zero_()
        draft.ids.zero_()

    def new_tree(r):
        d = kdtree_jit.Draft(draft.lp[:r], draft.ids[:r])
        # The ops always write score: every tree here has one.
        t = rt.build_ddtree(d, budget[:r], root[:r], N,
                            past_len=past_len[:r], want_score=True)
        if a.stub:
            for x in t:
                x.zero_()
            t.n_nodes.fill_(1)
        return t
    tree = new_tree(R)
    # verify_attn's own, smaller round: RA requests of the same trees.
    tree_a, past_a = new_tree(RA), past_len[:RA]
    pages = (a.past + N + a.page - 1) // a.page
    block_table = torch.arange(RA * pages, **i32).view(RA, pages)
    kv = torch.zeros(RA * pages, a.page, 576, dtype=torch.bfloat16,
                     device=dev)
    q = torch.zeros(RA, N, H, 576, dtype=torch.bfloat16, device=dev)
    scale = 0.1
    ws = rt.verify_attn_workspace(q, kv, block_table)
    attn = rt.verify_attn(q, kv, block_table, past_a, tree_a, scale,
                          workspace=ws)
    target = torch.zeros(R, N, **i32)
    acc = rt.tree_accept(tree, target, L)
    shapes = {
        "draft_topk": "R=%d L=%d K=%d V=%d" % (R, L, K, V),
        "build_ddtree": "R=%d L=%d K=%d N_MAX=%d" % (R, L, K, N),
        "verify_attn": "R=%d N_MAX=%d H=%d past=%d" % (RA, N, H, a.past),
        "tree_accept": "R=%d N_MAX=%d L=%d" % (R, N, L),
    }
    sync()
    s = torch.cuda.current_stream().cuda_stream if not a.stub else 0
    sp = ffi.cast("void *", s)

    # The raw calls: the structs built once, as a C caller would.
    c_draft = ffi.new("kdtree_draft *", dict(
        lp=draft.lp.data_ptr(), ids=draft.ids.data_ptr(), n_requests=R * L,
        depth=1, k=K))
    c_tree = ffi.new("kdtree_tree *", dict(
        {f: x.data_ptr() for f, x in zip(kdtree_jit.Tree._fields, tree)},
        n_requests=R, n_max=N))
    c_draft3 = ffi.new("kdtree_draft *", dict(
        lp=draft.lp.data_ptr(), ids=draft.ids.data_ptr(), n_requests=R,
        depth=L, k=K))
    c_req = ffi.new("kdtree_requests *", dict(
        budget=budget.data_ptr(), root_token=root.data_ptr(),
        past_len=past_len.data_ptr(), n_requests=R))
    c_tree_a = ffi.new("kdtree_tree *", dict(
        n_nodes=tree_a.n_nodes.data_ptr(),
        anc_mask=tree_a.anc_mask.data_ptr(), n_requests=RA, n_max=N))
    c_req_a = ffi.new("kdtree_requests *", dict(
        past_len=past_a.data_ptr(), n_requests=RA))
    c_attn = ffi.new("kdtree_attn *", dict(
        q=q.data_ptr(), o=attn.o.data_ptr(), lse=attn.lse.data_ptr(),
        workspace=ws.data_ptr(), workspace_bytes=ws.numel(), n_heads=H,
        scale=scale))
    c_kv = ffi.new("kdtree_kv_cache *", dict(
        data=kv.data_ptr(), block_table=block_table.data_ptr(),
        page_size=a.page, max_pages=pages))
    c_acc = ffi.new("kdtree_accept *", dict(
        {f: x.data_ptr() for f, x in zip(kdtree_jit.Accept._fields, acc)},
        n_requests=R, depth=L))
    h, lg = rt._rt, logits.data_ptr()
    k = torch.ops.kdtree
    lp, ids = draft
    tr = tuple(tree)
    nn_a, mask_a = tree_a.n_nodes, tree_a.anc_mask
    # The functional empty ops allocate outputs like these, like the real
    # ones' in number, shape and dtype.
    empty_lib, e = empty_ops(torch, key, {
        "draft_topk": tuple(draft), "build_ddtree": tr,
        "verify_attn": tuple(attn), "tree_accept": tuple(acc)})
    calls = {
        "draft_topk": {
            "raw": lambda: lib.kdtree_draft_topk(h, c_draft, lg, 1, V, sp),
            "checked": lambda: rt.draft_topk(logits, K, out=(lp, ids)),
            "out=": lambda: rt.draft_topk(logits, K, out=draft),
            "alloc": lambda: rt.draft_topk(logits, K),
            "bound": rt.bind("draft_topk", logits, K, out=draft),
            "op_out": lambda: k.draft_topk_out(logits, K, lp, ids),
            "op": lambda: k.draft_topk(logits, K),
            "torch_out": lambda: e.draft_topk_out(logits, K, lp, ids),
            "torch_op": lambda: e.draft_topk(logits, K)},
        "build_ddtree": {
            "raw": lambda: lib.kdtree_build_ddtree(h, c_tree, c_draft3,
                                                   c_req, sp),
            "checked": lambda: rt.build_ddtree(draft, budget, root, N,
                                               past_len=past_len,
                                               out=tuple(tr)),
            "out=": lambda: rt.build_ddtree(draft, budget, root, N,
                                            past_len=past_len, out=tree),
            "alloc": lambda: rt.build_ddtree(draft, budget, root, N,
                                             past_len=past_len,
                                             want_score=True),
            "bound": rt.bind("build_ddtree", draft, budget, root, N,
                             past_len=past_len, out=tree),
            "op_out": lambda: k.build_ddtree_out(lp, ids, budget, root, N,
                                                 None, past_len, *tr),
            "op": lambda: k.build_ddtree(lp, ids, budget, root, N, None,
                                         past_len),
            "torch_out": lambda: e.build_ddtree_out(lp, ids, budget, root, N,
                                                    None, past_len, *tr),
            "torch_op": lambda: e.build_ddtree(lp, ids, budget, root, N,
                                               None, past_len)},
        "verify_attn": {
            "raw": lambda: lib.kdtree_verify_attn(h, c_attn, c_tree_a,
                                                  c_req_a, c_kv, sp),
            "checked": lambda: rt.verify_attn(q, kv, block_table, past_a,
                                              tree_a, scale, workspace=ws,
                                              out=(attn.o, attn.lse)),
            "out=": lambda: rt.verify_attn(q, kv, block_table, past_a,
                                           tree_a, scale, workspace=ws,
                                           out=attn),
            "alloc": lambda: rt.verify_attn(q, kv, block_table, past_a,
                                            tree_a, scale),
            "bound": rt.bind("verify_attn", q, kv, block_table, past_a,
                             tree_a, scale, workspace=ws, out=attn),
            "op_out": lambda: k.verify_attn_out(q, kv, block_table, past_a,
                                                nn_a, mask_a, scale,
                                                attn.o, attn.lse, ws),
            "op": lambda: k.verify_attn(q, kv, block_table, past_a, nn_a,
                                        mask_a, scale),
            "torch_out": lambda: e.verify_attn_out(q, kv, block_table,
                                                   past_a, nn_a, mask_a,
                                                   scale, attn.o, attn.lse,
                                                   ws),
            "torch_op": lambda: e.verify_attn(q, kv, block_table, past_a,
                                              nn_a, mask_a, scale)},
        "tree_accept": {
            "raw": lambda: lib.kdtree_tree_accept(h, c_acc, c_tree,
                                                  target.data_ptr(), c_req,
                                                  sp),
            "checked": lambda: rt.tree_accept(tree, target, L,
                                              out=tuple(acc)),
            "out=": lambda: rt.tree_accept(tree, target, L, out=acc),
            "alloc": lambda: rt.tree_accept(tree, target, L),
            "bound": rt.bind("tree_accept", tree, target, L, out=acc),
            "op_out": lambda: k.tree_accept_out(
                tree.n_nodes, tree.token, tree.first_child,
                tree.next_sibling, target, L, None, *acc),
            "op": lambda: k.tree_accept(
                tree.n_nodes, tree.token, tree.first_child,
                tree.next_sibling, target, L, None),
            "torch_out": lambda: e.tree_accept_out(
                tree.n_nodes, tree.token, tree.first_child,
                tree.next_sibling, target, L, None, *acc),
            "torch_op": lambda: e.tree_accept(
                tree.n_nodes, tree.token, tree.first_child,
                tree.next_sibling, target, L, None)},
    }
    # On a shared machine with no GPU, this thread's CPU time (the minimum
    # over repetitions) says more than the wall.
    clock = time.thread_time if a.stub else time.perf_counter
    rows = {}
    for name in KERNELS:
        row = rows[name] = {}
        for col in COLUMNS:
            fn = calls[name][col]
            if col == "bound":
                fn = (lambda b=fn: b(s))
            row[col] = per_call_us(fn, a.calls, a.reps, sync, clock)
    # What allocating adds: one torch.empty per output.
    alloc_us = per_call_us(lambda: torch.empty(R, N, **i32), a.calls,
                           a.reps, sync, clock)
    n_out = {"draft_topk": 2, "build_ddtree": 9, "verify_attn": 3,
             "tree_accept": 4}
    where = "stub library, CPU tensors" if a.stub else \
        torch.cuda.get_device_name()
    print("overhead: host us per call (%s of %d x %d calls), %s, "
          "kdtree_jit %s, torch %s" % (
              "thread CPU time, best" if a.stub else "wall time, median",
              a.reps, a.calls, where, kdtree_jit.version, torch.__version__))
    derived = (("checked", "raw"), ("op_out", "raw"), ("op", "raw"),
               ("op_out", "torch_out"), ("op", "torch_op"))
    print("  %-13s" % "kernel" + "".join("%10s" % c for c in COLUMNS) +
          "".join("%19s" % ("%s-%s" % d) for d in derived) + "  shape")
    for name in KERNELS:
        row = rows[name]
        print("  %-13s" % name + "".join("%10.2f" % row[c] for c in COLUMNS)
              + "".join("%19.2f" % (row[a] - row[b]) for a, b in derived)
              + "  " + shapes[name])
    print("  allocating: torch.empty(%d, %d, int32) %.2f us; arrays an "
          "allocating call makes: %s" % (
              R, N, alloc_us, ", ".join("%s %d" % kv for kv in n_out.items())))
    del empty_lib
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"where": where, "version": kdtree_jit.version,
                       "torch": torch.__version__, "argv": sys.argv[1:],
                       "shapes": shapes, "us_per_call": rows,
                       "torch_empty_us": alloc_us,
                       "arrays_allocated": n_out}, f, indent=1)
    return 0


def print_schema_costs(a):
    import torch
    if a.stub:
        dev, key, clock = torch.device("cpu"), "CPU", time.thread_time
    elif torch.cuda.is_available():
        dev, key, clock = torch.device("cuda"), "CUDA", time.perf_counter
    else:
        print("overhead: needs a CUDA device (or --stub)", file=sys.stderr)
        return 77
    rows = schema_costs(torch, dev, key, a.calls, a.reps, clock)
    print("overhead --schemas: torch's dispatch of an empty op, us per call "
          "(%s of %d x %d calls), tensors on %s, torch %s" % (
              "thread CPU time" if a.stub else "wall time", a.reps, a.calls,
              dev, torch.__version__))
    print("  %-44s%10s%10s" % ("schema, registration, call", "median",
                               "best"))
    for label, med, best in rows:
        print("  %-44s" % label + ("%10.2f%10.2f" % (med, best)
                                   if med is not None else
                                   "%20s" % "(not in this torch)"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"where": str(dev), "torch": torch.__version__,
                       "argv": sys.argv[1:],
                       "us_per_call": [r[:2] for r in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
