"""verify_attn over an FP8 (e4m3) KV cache through Python on the GPU: the
Runtime method and the torch ops, a torch.float8_e4m3fn cache and the
same bytes as uint8 (they must give the same bits), both arithmetics
(math="bf16" and "e4m3"), SGLang's token pool (PAGE = 1, scale 1) and a
paged cache with a scale, against the C reference over the dequantized
cache (ref/verify_attn.c) with the tolerances tests/gpu_verify_attn.c
derives from docs/contract.md §3.  Skipped without torch, CUDA, a device
or a C compiler for the reference."""
import random
import sys

import pytest

import _util
import kdtree_jit


def log(msg):
    # Visible in make check's log (tests/test_python.sh runs pytest -s).
    print("test_gpu_e4m3: " + msg)
    sys.stdout.flush()


def random_masks(rng, R, N, n_nodes):
    """Ancestor masks of random trees (parent < child, own bit set), as
    lists of uint32 words [R][N][W]."""
    W = (N + 31) // 32
    out = []
    for r in range(R):
        rows = []
        for i in range(N):
            words = [0] * W
            if 0 < i < n_nodes[r]:
                words = list(rows[rng.randrange(i)])
            words[i // 32] |= 1 << (i % 32)
            rows.append(words)
        out.append(rows)
    return out


def e4m3_cache(torch, g, n_pages, P):
    """float8_e4m3fn values in [-1, 1): one in 8 2^-8 smaller (subnormal
    codes), one in 64 zero."""
    x = torch.rand(n_pages, P, 576, device="cuda", generator=g) * 2 - 1
    k = torch.randint(0, 64, x.shape, device="cuda", generator=g)
    x = torch.where(k % 8 == 1, x * 2.0 ** -8, x)
    x = torch.where(k == 0, torch.zeros_like(x), x)
    return x.to(torch.float8_e4m3fn)


CASES = [
    # R, H, N_MAX, PAGE, past, n_nodes, kv_scale, scale
    (2, 8, 65, 1, [300, 17], [65, 5], 1.0, 192 ** -0.5),   # token pool
    (1, 16, 17, 64, [1000], [17], 0.37, 0.3),              # vLLM-style
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("math_mode", ["bf16", "e4m3"])
def test_verify_attn_e4m3_cache_against_reference(case, math_mode):
    rt, torch = _util.need_gpu()
    pytest.importorskip("kdtree_jit.torch")  # registers torch.ops.kdtree
    c = _util.c_reference("verify_attn")
    if c is None:
        pytest.skip("no C compiler for ref/verify_attn.c")
    ffi, lib = c
    R, H, N, P, past, n_nodes, kv_scale, scale = CASES[case]
    g = torch.Generator(device="cuda").manual_seed(11 + case)
    rng = random.Random(12 + case)
    max_pages = (max(p + n for p, n in zip(past, n_nodes)) + P - 1) // P + 1
    n_pages = R * max_pages + 3
    perm = list(range(n_pages))
    rng.shuffle(perm)
    # PAGE = 1 with shuffled pages is SGLang's req_to_token: a token index
    # per position
    block_table = torch.tensor([perm[r * max_pages:(r + 1) * max_pages]
                                for r in range(R)], dtype=torch.int32,
                               device="cuda")
    q = (torch.rand(R, N, H, 576, device="cuda", generator=g) * 2 - 1).to(
        torch.bfloat16)
    kv = e4m3_cache(torch, g, n_pages, P)
    kv_u8 = kv.view(torch.uint8)
    mask = random_masks(rng, R, N, n_nodes)
    mask_t = torch.tensor([[[v - (1 << 32) if v >= 1 << 31 else v
                             for v in row] for row in m] for m in mask],
                          dtype=torch.int32, device="cuda")
    past_t = torch.tensor(past, dtype=torch.int32, device="cuda")
    nn_t = torch.tensor(n_nodes, dtype=torch.int32, device="cuda")
    tree = kdtree_jit.Tree(nn_t, None, None, None, None, None, None, None,
                           mask_t)

    o, lse = rt.verify_attn(q, kv, block_table, past_t, tree, scale,
                            kv_scale=kv_scale, math=math_mode)
    # the same bytes as uint8, through the method and the torch op
    o2, lse2 = rt.verify_attn(q, kv_u8, block_table, past_t, tree, scale,
                              kv_scale=kv_scale, math=math_mode)
    o3, lse3 = torch.ops.kdtree.verify_attn(q, kv_u8, block_table, past_t,
                                            nn_t, mask_t, scale,
                                            kv_scale=kv_scale,
                                            math=math_mode)
    torch.cuda.synchronize()
    assert torch.equal(o, o2) and torch.equal(lse, lse2)
    assert torch.equal(o, o3) and torch.equal(lse, lse3)

    rows = R * N * H
    qh, qa = _util.c_array(ffi, "uint16_t", q.cpu().view(torch.int16))
    kh, ka = _util.c_array(ffi, "uint8_t", kv_u8.cpu())
    bt = ffi.new("int32_t[]", _util.flat(block_table.tolist()))
    pl = ffi.new("int32_t[]", past)
    nn = ffi.new("int32_t[]", n_nodes)
    mk = ffi.new("uint32_t[]", _util.flat(mask))
    ro = ffi.new("float[]", rows * 512)
    rl = ffi.new("float[]", rows)
    lib.ref_verify_attn_kv(ro, rl, qh, kh, 1, kv_scale, bt, pl, nn, mk, R, H,
                           N, P, max_pages, scale)
    f64 = torch.float64
    want = torch.tensor(list(ro), dtype=f64).reshape(rows, 512)
    wl = torch.tensor(list(rl), dtype=f64)
    got = o.double().cpu().reshape(rows, 512)
    gl = lse.double().cpu().reshape(rows)
    vmax = kv_scale * kv.float().abs().max().item()
    node = torch.arange(rows) // H % N
    req = torch.arange(rows) // (N * H)
    padded = node >= torch.tensor(n_nodes)[req]
    live = ~padded
    # padded rows: exactly 0 and -inf
    if padded.any():
        assert float(got[padded].abs().max()) == 0.0
        assert bool(torch.all(torch.isinf(gl[padded]) & (gl[padded] < 0)))
    err = (got - want).abs()
    if math_mode == "bf16":
        tol = (want.abs() + vmax) / 128
        ltol = 1e-3 * (1 + wl.abs())
        worst = "max |err| %.3g" % float(err[live].max())
    else:
        rq = ffi.new("float[]", rows * 512)
        rlq = ffi.new("float[]", rows)
        st = ffi.new("double[]", rows * 3)
        lib.ref_verify_attn_qe4m3(rq, rlq, st, qh, kh, 1, kv_scale, bt, pl,
                                  nn, mk, R, H, N, P, max_pages, scale)
        oq = torch.tensor(list(rq), dtype=f64).reshape(rows, 512)
        lq = torch.tensor(list(rlq), dtype=f64)
        s = torch.tensor(list(st), dtype=f64).reshape(rows, 3)
        n, s0, s2 = s[:, 0], s[:, 1].clamp(min=1), s[:, 2]
        # the contract's worst-case bounds of each row (ref_qe4m3_bounds)
        ob, lb = ffi.new("double *"), ffi.new("double *")
        bounds = []
        for i in range(rows):
            lib.ref_qe4m3_bounds(float(n[i]), float(s0[i]), ob, lb)
            bounds.append((ob[0], lb[0]))
        bounds = torch.tensor(bounds, dtype=f64)
        eq = (oq - want).abs()
        tol = eq + vmax * bounds[:, :1] + (want.abs() + vmax) / 256
        ltol = (lq - wl).abs() + bounds[:, 1] + 1e-3 * (1 + wl.abs())
        # each row's RMS error against its typical bound (the derivation
        # is in tests/gpu_verify_attn.c)
        sigma = 2 * vmax * torch.sqrt((2.0 ** -8 * s2 + 2.0 ** -20 * n) / 3)
        sigma = sigma / s0
        rms = err.pow(2).mean(1).sqrt()
        lim = (eq.pow(2).mean(1).sqrt() + 4 * sigma +
               (want.pow(2).mean(1).sqrt() + vmax) / 256)
        ratio = (rms / lim)[live]
        assert bool(torch.all(ratio <= 1)), \
            "%d rows over their RMS bound (worst %.3g of it)" % (
                int((ratio > 1).sum()), float(ratio.max()))
        worst = "max |err| %.3g, worst row RMS at %.2f of its bound" % (
            float(err[live].max()), float(ratio.max()))
    bad = (err > tol)[live]
    assert not bool(bad.any()), "%d of %d outputs off (first at %s)" % (
        int(bad.sum()), bad.numel(), bad.nonzero()[0].tolist())
    lbad = ((gl - wl).abs() > ltol)[live]
    assert not bool(lbad.any()), "%d lse values off" % int(lbad.sum())
    log("verify_attn e4m3 cache (float8_e4m3fn and uint8, method and op) "
        "math=%s R=%d H=%d N_MAX=%d PAGE=%d kv_scale=%g: %s" %
        (math_mode, R, H, N, P, kv_scale, worst))
