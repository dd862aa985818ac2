#!/usr/bin/env python3
"""Host time of one kernel call through Python, per kernel, beside the raw
cffi call of the same C function with the same (prebuilt) structs:

    raw cffi       lib.kdtree_<kernel>(rt, structs..., stream): the floor
    method, out=   Runtime.<kernel>(..., out=...): outputs given, the same
                   arguments and out= namedtuple each call, as in a loop
                   (the runtime's remembered call: kdtree_jit._runtime)
    method, tuple  the same with out= a new plain tuple of the same
                   outputs each call: every argument through its slot's
                   checks (each remembering the tensor it saw last)
    method         Runtime.<kernel>(...): outputs allocated
    bound          Runtime.bind(...)(): checked once
    torch op       torch.ops.kdtree.<kernel>_out / <kernel> (import
                   kdtree_jit.torch): the same method behind torch's
                   dispatcher, which adds its own cost

Each row is timed at a shape whose kernel takes less time than the host
spends launching it, so that the GPU never holds the host back and each
column is the host's cost (a long kernel would hide it: the queue of
launches fills and every column shows the kernel's time).  So draft_topk
runs over a small vocabulary and verify_attn over one request with a short
past; the table names each row's shape.  The last line says what one
torch.empty costs, which is what an allocating call adds per output.

No timing is asserted anywhere; this prints them.

    python3 python/examples/overhead.py [--requests 8] [--calls 2000]
        [--json out.json]
    python3 python/examples/overhead.py --stub    # no GPU: CPU tensors and
        # a stub libkdtree (cc-built, every kernel returns 0): the Python
        # side alone, for profiling where there is no device
"""
import argparse
import json
import os
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
    src, so = os.path.join(d, "stub.c"), os.path.join(d, "libkdtree.so")
    with open(src, "w") as f:
        f.write(STUB_C % _lib.EXPECTED_ABI)
    subprocess.check_call([os.environ.get("CC", "cc"), "-O2", "-shared",
                           "-fPIC", src, "-o", so])
    return so


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
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--stub", action="store_true",
                    help="CPU tensors and a stub library (no GPU)")
    ap.add_argument("--no-torch-ops", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.stub:
        os.environ["KDTREE_LIBRARY"] = stub_library()
    import torch
    import kdtree_jit
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
        dev = torch.device("cpu")

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
        rt = kdtree_jit.Runtime()
        dev = torch.device("cuda", rt.device)
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
        t = rt.build_ddtree(d, budget[:r], root[:r], N,
                            past_len=past_len[:r])
        if a.stub:
            for x in t:
                if x is not None:
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
    attn = rt.verify_attn(q, kv, block_table, past_a, tree_a, scale)
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
        {f: (0 if x is None else x.data_ptr())
         for f, x in zip(kdtree_jit.Tree._fields, tree)},
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
    ws_n = rt.verify_attn_workspace_size(RA, H, N, a.page, pages)
    ws = torch.empty(max(ws_n, 16), dtype=torch.uint8, device=dev)
    c_attn = ffi.new("kdtree_attn *", dict(
        q=q.data_ptr(), o=attn.o.data_ptr(), lse=attn.lse.data_ptr(),
        workspace=ws.data_ptr() if ws_n else 0, workspace_bytes=ws_n,
        n_heads=H, scale=scale))
    c_kv = ffi.new("kdtree_kv_cache *", dict(
        data=kv.data_ptr(), block_table=block_table.data_ptr(),
        page_size=a.page, max_pages=pages))
    c_acc = ffi.new("kdtree_accept *", dict(
        {f: x.data_ptr() for f, x in zip(kdtree_jit.Accept._fields, acc)},
        n_requests=R, depth=L))
    h, lg = rt._rt, logits.data_ptr()
    raw = {
        "draft_topk": lambda: lib.kdtree_draft_topk(h, c_draft, lg, 1, V,
                                                    sp),
        "build_ddtree": lambda: lib.kdtree_build_ddtree(h, c_tree, c_draft3,
                                                        c_req, sp),
        "verify_attn": lambda: lib.kdtree_verify_attn(h, c_attn, c_tree_a,
                                                      c_req_a, c_kv, sp),
        "tree_accept": lambda: lib.kdtree_tree_accept(h, c_acc, c_tree,
                                                      target.data_ptr(),
                                                      c_req, sp),
    }
    method_out = {
        "draft_topk": lambda: rt.draft_topk(logits, K, out=draft),
        "build_ddtree": lambda: rt.build_ddtree(draft, budget, root, N,
                                                past_len=past_len, out=tree),
        "verify_attn": lambda: rt.verify_attn(q, kv, block_table, past_a,
                                              tree_a, scale, out=attn),
        "tree_accept": lambda: rt.tree_accept(tree, target, L, out=acc),
    }
    method_tuple = {
        "draft_topk": lambda: rt.draft_topk(logits, K, out=tuple(draft)),
        "build_ddtree": lambda: rt.build_ddtree(draft, budget, root, N,
                                                past_len=past_len,
                                                out=tuple(tree)),
        "verify_attn": lambda: rt.verify_attn(q, kv, block_table, past_a,
                                              tree_a, scale,
                                              out=tuple(attn)),
        "tree_accept": lambda: rt.tree_accept(tree, target, L,
                                              out=tuple(acc)),
    }
    method_new = {
        "draft_topk": lambda: rt.draft_topk(logits, K),
        "build_ddtree": lambda: rt.build_ddtree(draft, budget, root, N,
                                                past_len=past_len),
        "verify_attn": lambda: rt.verify_attn(q, kv, block_table, past_a,
                                              tree_a, scale),
        "tree_accept": lambda: rt.tree_accept(tree, target, L),
    }
    bound = {
        "draft_topk": rt.bind("draft_topk", logits, K, out=draft),
        "build_ddtree": rt.bind("build_ddtree", draft, budget, root, N,
                                past_len=past_len, out=tree),
        "verify_attn": rt.bind("verify_attn", q, kv, block_table, past_a,
                               tree_a, scale, out=attn),
        "tree_accept": rt.bind("tree_accept", tree, target, L, out=acc),
    }
    ops_out = ops_new = None
    if not a.no_torch_ops and not a.stub:
        import kdtree_jit.torch  # noqa: F401
        k = torch.ops.kdtree
        # The ops always write score: a tree with one to write into.
        tree_s = rt.build_ddtree(draft, budget, root, N, past_len=past_len,
                                 want_score=True)
        ops_out = {
            "draft_topk": lambda: k.draft_topk_out(logits, K, *draft),
            "build_ddtree": lambda: k.build_ddtree_out(
                draft.lp, draft.ids, budget, root, N, None, past_len,
                *tree_s),
            "verify_attn": lambda: k.verify_attn_out(
                q, kv, block_table, past_a, tree_a.n_nodes, tree_a.anc_mask,
                scale, *attn),
            "tree_accept": lambda: k.tree_accept_out(
                tree.n_nodes, tree.token, tree.first_child,
                tree.next_sibling, target, L, None, *acc),
        }
        ops_new = {
            "draft_topk": lambda: k.draft_topk(logits, K),
            "build_ddtree": lambda: k.build_ddtree(
                draft.lp, draft.ids, budget, root, N, None, past_len),
            "verify_attn": lambda: k.verify_attn(
                q, kv, block_table, past_a, tree_a.n_nodes, tree_a.anc_mask,
                scale),
            "tree_accept": lambda: k.tree_accept(
                tree.n_nodes, tree.token, tree.first_child,
                tree.next_sibling, target, L, None),
        }
    clock = time.thread_time if a.stub else time.perf_counter
    rows = {}
    for name in raw:
        row = {}
        for col, table in (("raw", raw), ("method_out", method_out),
                           ("method_tuple", method_tuple),
                           ("method_alloc", method_new),
                           ("bound", {n: (lambda b=b: b(s))
                                      for n, b in bound.items()}),
                           ("op_out", ops_out), ("op_alloc", ops_new)):
            if table is not None:
                # On a shared machine with no GPU, this thread's CPU time
                # (the minimum over repetitions) says more than the wall.
                row[col] = per_call_us(table[name], a.calls, a.reps, sync,
                                       clock)
        rows[name] = row
    # What allocating adds: one torch.empty per output, against a view of
    # one larger allocation (what splitting one block would cost instead).
    block = torch.empty(8 * R * N, **i32)
    alloc = {
        "torch_empty": per_call_us(lambda: torch.empty(R, N, **i32), a.calls,
                                   a.reps, sync, clock),
        "as_strided_view": per_call_us(
            lambda: block.as_strided((R, N), (N, 1), R * N), a.calls, a.reps,
            sync, clock)}
    n_out = {"draft_topk": 2, "build_ddtree": 8, "verify_attn": 2,
             "tree_accept": 4}
    where = "stub library, CPU tensors" if a.stub else \
        torch.cuda.get_device_name()
    print("overhead: host us per call (%s of %d x %d calls), %s" % (
        "thread CPU time, best" if a.stub else "wall time, median",
        a.reps, a.calls, where))
    cols = [c for c in ("raw", "method_out", "method_tuple", "method_alloc",
                        "bound", "op_out", "op_alloc")
            if c in rows["tree_accept"]]
    print("  %-13s" % "kernel" + "".join("%13s" % c for c in cols) +
          "%11s  %s" % ("out - raw", "shape"))
    for name, row in rows.items():
        print("  %-13s" % name + "".join("%13.2f" % row[c] for c in cols) +
              "%11.2f  %s" % (row["method_out"] - row["raw"], shapes[name]))
    print("  allocating: torch.empty(%d, %d, int32) %.2f us, a view of one "
          "block (as_strided) %.2f us; outputs allocated: %s" % (
              R, N, alloc["torch_empty"], alloc["as_strided_view"],
              ", ".join("%s %d" % kv for kv in n_out.items())))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"where": where, "shapes": shapes, "us_per_call": rows,
                       "alloc_us": alloc, "outputs_allocated": n_out}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
