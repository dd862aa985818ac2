#!/usr/bin/env python3
"""perf_tables.py: docs/performance.md's tables, made from the bench's JSON.

    python3 tools/dev/perf_tables.py --check docs/performance.md
    python3 tools/dev/perf_tables.py --write docs/performance.md

The figures of docs/performance.md live in docs/bench/*.json, one file per
bench run in kdtree-bench's JSON shape with a "record" object (the commit
measured, the date, the command, where the file comes from).  Each table
of the document stands between two markers,

    <!-- perf_tables: NAME -->
    ...
    <!-- /perf_tables -->

and is this script's output for NAME, never edited by hand:

    runs                   the JSON files and where each comes from
    targets                each target against the latest figure for it
    kernel KERNEL TARGET   the latest run's rows of KERNEL built for
                           TARGET (target_of: the run's "target", else
                           its record's, else its "arch"), under a heading
                           that names the run; runs whose record has
                           "only" (a bench limited by --only) are left
                           out: they hold a few of the rows
    kernel KERNEL TARGET FILE
                           the rows of that run (a file of docs/bench/)

--write replaces every table with its output; --check exits 1 and shows
the difference where a table is not its output (a new JSON file, a table
edited by hand), which `make check` runs (tests/test_docs.sh).

A run too long for one command (the FP8 bench: a command per selection
of --only) gives several --json-out files; --record makes one file of
docs/bench/ of them, in the order given:

    python3 tools/dev/perf_tables.py --record OUT.json --commit C \
        --date YYYY-MM-DD --command CMD --source SRC [--only TEXT] IN.json...

Their rows (kernels, baselines, load, targets, overhead) follow each
other, the baseline runs and cases too, the notes once each; the other
fields are the first file's, and every file must name the same tool,
version, mode, device, arch, target and NVRTC (a file of another GPU or
build is refused, the output left unwritten).
Python 3 standard library only.
"""
import argparse
import difflib
import glob
import json
import os
import re
import sys

BEGIN = re.compile(r"^<!-- perf_tables: (.+?) -->$")
END = "<!-- /perf_tables -->"


def load_runs(bench_dir):
    """{file name: report} of every JSON file, oldest run first."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(bench_dir, "*.json"))):
        with open(path) as f:
            d = json.load(f)
        rec = d.get("record") or {}
        for k in ("commit", "date", "command", "source"):
            if not rec.get(k):
                sys.exit("perf_tables: %s: record has no %s" % (path, k))
        runs[os.path.basename(path)] = d
    return dict(sorted(runs.items(),
                       key=lambda kv: (kv[1]["record"]["date"], kv[0])))


# ---- formatting -----------------------------------------------------------

def as_written(v, most, fmt):
    """v as the run wrote it when it has at most `most` decimals (a
    transcribed 0.522 stays 0.522, 160 stays 160), else in fmt (the
    bench writes six digits)."""
    s = repr(v)
    return fmt % v if "." in s and len(s.split(".")[1]) > most else s


def us(v):
    if v is None:
        return "-"
    return as_written(v, 3, "%.2f" if abs(v) >= 1 else "%.3g")


def times(v):
    return "-" if v is None else as_written(v, 2, "%.2f") + "x"


def whole(v):
    return "-" if v is None else "%.0f" % v


def times(v):
    return "-" if v is None else us(round(v, 2) if len(repr(v)) > 6 else v) \
        + "x"


def percent(v):
    return "-" if v is None else "%.1f%%" % (100 * v)


def table(head, rows):
    out = ["| " + " | ".join(head) + " |",
           "| " + " | ".join("---" for _ in head) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


# ---- the blocks -----------------------------------------------------------

def target_of(d):
    """What a run's kernels were built for: the bench's "target" where it
    wrote one, else the record's (KDTREE_TARGET named in the record),
    else the device's "arch", what the runtime builds for unless told
    otherwise."""
    return d.get("target") or d["record"].get("target") or d.get("arch")


def block_runs(runs):
    rows = []
    for name, d in runs.items():
        r = d["record"]
        rows.append(["`docs/bench/%s`" % name, str(d.get("device")),
                     str(target_of(d)), r["commit"], r["date"],
                     "`%s`" % r["command"]])
    return table(["file", "device", "target", "commit", "date", "command"],
                 rows)


def latest(runs, kernel, arch, only=None):
    """The newest run with rows of kernel built for arch, and the rows;
    with `only`, that run (a file name) whatever its record says."""
    found = None
    for name, d in runs.items():
        if only is not None and name != only:
            continue
        if only is None and d["record"].get("only"):
            continue
        rows = [r for r in d.get("kernels") or [] if r.get("kernel") == kernel]
        if rows and target_of(d) == arch:
            found = (name, d, rows)
    if not found:
        sys.exit("perf_tables: no run of %s for %s" % (kernel, arch))
    return found


def block_kernel(runs, kernel, arch, only=None):
    name, d, rows = latest(runs, kernel, arch, only)
    has = lambda key: any(r.get(key) is not None for r in rows)
    cols = [("config", lambda r: r.get("config", ""))]
    # verify_attn's variants name their cache and arithmetic (runs before
    # them have neither: their tables stay as they were)
    typed = has("kv_dtype")
    if typed:
        cols.append(("cache", lambda r: r.get("kv_dtype") or "-"))
        cols.append(("arithmetic", lambda r: r.get("math") or "-"))
    if has("us"):
        cols.append(("µs", lambda r: us(r.get("us"))))
    if has("tflop_per_s"):
        cols.append(("TFLOP/s", lambda r: whole(r.get("tflop_per_s"))))
    if typed and has("flop_fraction"):
        # of the dense bf16 peak, or the FP8 one where the arithmetic is
        # e4m3 (tools/bench_peaks.c)
        cols.append(("of the peak",
                     lambda r: percent(r.get("flop_fraction"))))
    if has("tb_per_s"):
        cols.append(("TB/s", lambda r: us(r.get("tb_per_s"))))
    if has("bw_fraction"):
        cols.append(("of the bandwidth", lambda r: percent(r.get("bw_fraction"))))
    if has("sm_mhz"):
        cols.append(("MHz", lambda r: whole(r.get("sm_mhz"))))
    names = []
    for r in rows:
        for b in r.get("baselines") or []:
            if b["name"] not in names:
                names.append(b["name"])

    def base(r, n):
        return next((b for b in r.get("baselines") or [] if b["name"] == n),
                    {})
    for n in names:
        if any(base(r, n).get("us") is not None for r in rows):
            cols.append(("%s µs" % n,
                         lambda r, n=n: us(base(r, n).get("us"))))
        if any(base(r, n).get("ours_faster_by") is not None for r in rows):
            cols.append(("%s / ours" % n,
                         lambda r, n=n: times(base(r, n).get("ours_faster_by"))))
    rec = d["record"]
    out = ["### %s, %s, %s: %s (%s)" % (kernel, d.get("device"), arch,
                                       rec["commit"], rec["date"]), ""]
    return out + table([c[0] for c in cols],
                       [[c[1](r) for c in cols] for r in rows])


# ---- targets ----------------------------------------------------------------
# Each target names the run and the rows its figure comes from; the verdict
# is computed from those figures, so a new run that moves them moves it.

def row(runs, name, kernel, config):
    for r in runs[name].get("kernels") or []:
        if r.get("kernel") == kernel and r.get("config") == config:
            return r
    sys.exit("perf_tables: %s has no %s %s" % (name, kernel, config))


def baseline(r, label):
    for b in r.get("baselines") or []:
        if b["name"] == label:
            return b
    sys.exit("perf_tables: %s %s has no baseline %s"
             % (r["kernel"], r["config"], label))


def load_of(runs, name, kernel):
    for r in runs[name].get("load") or []:
        if r.get("kernel") == kernel:
            return r
    sys.exit("perf_tables: %s has no load row of %s" % (name, kernel))


def verdict(flags):
    return "met" if all(flags) else "in part" if any(flags) else "not met"


WG, PT = "h200-verify_attn-sm_90a-29b0335.json", \
    "h200-verify_attn-sm_90-29b0335.json"
OLD, CHECK, EARLY = "h200-c74b6d8.json", "h200-14ca00a.json", \
    "h200-792fbf1.json"
VA = "H=%d R=%d past_len=%d rows=%d"


def t_warm(runs):
    ks = ("verify_attn", "tree_accept")
    v = [load_of(runs, OLD, k)["warm_ms"] for k in ks]
    return OLD, ", ".join("%s %s ms" % (k, us(x)) for k, x in zip(ks, v)), \
        verdict(x < 1 for x in v)


def t_from_target(what):
    def get(runs):
        t = next(t for t in runs[EARLY]["targets"] if t["what"] == what)
        return EARLY, t["subject"], verdict([t["value"] < t["limit"]])
    return get


def t_cold(runs):
    ks = ("draft_topk", "build_ddtree", "verify_attn", "tree_accept")
    v = [load_of(runs, CHECK, k)["cold_over_bare"] for k in ks]
    return CHECK, ", ".join("%s %s" % (k, x) for k, x in zip(ks, v)), \
        verdict(x <= 1.10 for x in v)


def t_api(runs):
    v = runs[OLD]["overhead"][0]["added_us"]
    return OLD, "%s µs (tree_accept)" % us(v), verdict([v < 0.5])


def t_topk_torch(runs):
    r = row(runs, EARLY, "draft_topk", "R=1 K=64 bf16")
    x = baseline(r, "torch")["ours_faster_by"]
    return EARLY, "%s µs, torch %s" % (us(r["us"]), times(x)), \
        verdict([x >= 10])


def t_topk_bw(runs):
    r = row(runs, EARLY, "draft_topk", "R=64 K=64 bf16")
    return EARLY, "%s µs, %s" % (us(r["us"]), percent(r["bw_fraction"])), \
        verdict([r["bw_fraction"] >= 0.5])


def t_bd_small(runs):
    r = row(runs, OLD, "build_ddtree", "R=1 B=64")
    return OLD, "%s µs" % us(r["us"]), verdict([r["us"] < 15])


def t_bd_heap(config, want):
    def get(runs):
        r = row(runs, EARLY, "build_ddtree", config)
        x = baseline(r, "C heap, 1 core, requests in turn")["ours_faster_by"]
        return EARLY, "%s µs, the heap %s" % (us(r["us"]), times(x)), \
            verdict([x >= want])
    return get


def t_va_peak(H, R, share):
    def get(runs):
        r = row(runs, WG, "verify_attn", VA % (H, R, 32768, 65))
        return WG, "%s µs, %s TFLOP/s" % (us(r["us"]),
                                          whole(r["tflop_per_s"])), \
            verdict([r["tflop_per_s"] >= share * 989])
    return get


def t_va_torch(runs):
    r = row(runs, OLD, "verify_attn", VA % (8, 1, 32768, 65))
    x = baseline(r, "torch")["ours_faster_by"]
    return OLD, "torch %s" % times(x), verdict([x >= 2])


def t_va_few(runs):
    shapes = [(8, 1), (16, 1)]
    rs = [row(runs, WG, "verify_attn", VA % (H, R, 4096, 65))
          for H, R in shapes]
    x = [baseline(r, "flashinfer-bound")["ours_faster_by"] for r in rs]
    return WG, ", ".join("H=%d R=%d 4k %s" % (H, R, times(v))
                         for (H, R), v in zip(shapes, x)), \
        verdict(v >= 1.15 for v in x)


def t_va_660(runs):
    top = [r for r in runs[WG]["kernels"] if r["tflop_per_s"] >= 660]
    rest = [r["tflop_per_s"] for r in runs[WG]["kernels"]
            if r["tflop_per_s"] < 660]
    text = "; ".join("%s: %s" % (r["config"], whole(r["tflop_per_s"]))
                     for r in top)
    return WG, "%s (%d of %d shapes; the best of the rest %s)" % (
        text, len(top), len(runs[WG]["kernels"]), whole(max(rest))), \
        verdict([bool(top), not rest])


def t_pt(runs):
    r = row(runs, PT, "verify_attn", VA % (8, 1, 32768, 65))
    return PT, "%s µs, %s TFLOP/s" % (us(r["us"]), whole(r["tflop_per_s"])), \
        verdict([r["tflop_per_s"] >= 350])


# An e4m3 cache (docs/contract.md §3's two arithmetics).  Their goals
# are set on the H200; the runs that measured the current kernels are an
# H100's, which the figure says: the wgmma body's three arithmetics at
# both page sizes with fa3's baselines in one run, the portable body's
# beside FlashInfer's and SGLang's in another.
FP8_WG = "h100-verify_attn-fp8-sm_90a-17bceb1.json"
FP8_PT = "h100-verify_attn-fp8-sm_90-17bceb1.json"
E4M3 = re.compile(r" kv=e4m3 kv_scale=\S+ math=(\w+)$")


def shapes_of(runs, name, math, page=64):
    """{shape: (the bf16 cache's row, the e4m3 cache's row in `math`)} of
    run `name` at PAGE `page` (a shape whose run lacks either is left
    out)."""
    bf16, e4m3 = {}, {}
    for r in runs[name]["kernels"]:
        c = r["config"]
        on_page = (" page=1" in c) == (page == 1)
        if r.get("kernel") != "verify_attn" or not on_page:
            continue
        c = c.replace(" page=1", "")
        m = E4M3.search(c)
        if m is None:
            bf16[c] = r
        elif m.group(1) == math:
            e4m3[c[:m.start()]] = r
    return {c: (bf16[c], e4m3[c]) for c in e4m3 if c in bf16}


def span(xs, fmt="%.2f", unit="x"):
    return (fmt % min(xs)) + "-" + (fmt % max(xs)) + unit


def t_fp8_a(runs):
    x = [e["us"] / b["us"]
         for b, e in shapes_of(runs, FP8_WG, "bf16").values()]
    return FP8_WG, "%s the bf16 cache's time at %d shapes (H100)" % (
        span(x), len(x)), verdict(v <= 1.0 for v in x)


def t_fp8_cascade(runs):
    x = [baseline(e, "flashinfer-cascade")["ours_faster_by"]
         for _, e in shapes_of(runs, FP8_WG, "bf16").values()]
    return FP8_WG, "%s at %d shapes (H100)" % (span(x), len(x)), \
        verdict(v >= 1.3 for v in x)


def compute_bound(c):
    H, rows = (int(re.search(w + r"=(\d+)", c).group(1))
               for w in ("H", "rows"))
    return H >= 64 or rows >= 257


def t_fp8_b_peak(runs):
    x = [e["tflop_per_s"] for c, (_, e) in
         shapes_of(runs, FP8_WG, "e4m3").items() if compute_bound(c)]
    return FP8_WG, "%s TFLOP/s at %d shapes (H100)" % (
        span(x, "%.0f", ""), len(x)), verdict(v >= 1100 for v in x)


def t_fp8_b_speed(runs):
    x = [b["us"] / e["us"] for c, (b, e) in
         shapes_of(runs, FP8_WG, "e4m3").items() if " rows=65" not in c]
    return FP8_WG, "%s at %d shapes (H100)" % (span(x), len(x)), \
        verdict(v >= 1.6 for v in x)


def t_fp8_pt_peak(runs):
    r = row(runs, FP8_PT, "verify_attn",
            VA % (8, 1, 32768, 257) +
            " kv=e4m3 kv_scale=0.00223214296 math=e4m3")
    return FP8_PT, "%s TFLOP/s (H100; sm_90 has no FP8 mma.sync)" % whole(
        r["tflop_per_s"]), verdict([r["tflop_per_s"] >= 450])


def t_fp8_pt_triton(runs):
    x = []
    for page in (64, 1):
        a = shapes_of(runs, FP8_PT, "bf16", page)
        b = shapes_of(runs, FP8_PT, "e4m3", page)
        for c, (_, e) in a.items():
            rs = [e] + ([b[c][1]] if c in b else [])
            x.append(max(baseline(r, "sglang-triton")["ours_faster_by"]
                         for r in rs))
    return FP8_PT, "%s at %d shapes, the faster arithmetic (H100)" % (
        span(x), len(x)), verdict(v >= 5 for v in x)


def t_fp8_page1(runs):
    x = []
    for math in ("bf16", "e4m3"):
        p64 = shapes_of(runs, FP8_WG, math)
        for c, (b1, e1) in shapes_of(runs, FP8_WG, math, 1).items():
            if c not in p64:
                continue
            b64, e64 = p64[c]
            x.append(e1["us"] / e64["us"])
            if math == "bf16":  # the bf16 cache's row, once a shape
                x.append(b1["us"] / b64["us"])
    return FP8_WG, "%s at %d rows (H100)" % (span(x), len(x)), \
        verdict(v <= 1.05 for v in x)


TARGETS = [
    ("warm load from disk", "< 1 ms", t_warm),
    ("hot lookup", "< 1 µs", t_from_target("hot lookup")),
    ("cold over a bare NVRTC compile", "<= 1.10", t_cold),
    ("API cost over a bare cuLaunchKernel", "< 0.5 µs", t_api),
    ("draft_topk R=1 K=64 bf16", "10x torch", t_topk_torch),
    ("draft_topk R=64 K=64 bf16", "50% of 4.3 TB/s", t_topk_bw),
    ("build_ddtree B=64, 1 request", "< 15 µs", t_bd_small),
    ("build_ddtree B=512, 1 request", "faster than the C heap",
     t_bd_heap("R=1 B=512", 1)),
    ("build_ddtree B=512, 64 requests", "20x the C heap",
     t_bd_heap("R=64 B=512", 20)),
    ("verify_attn H=8 R=1 32k", "40% of 989 TFLOP/s (95 µs)",
     t_va_peak(8, 1, 0.40)),
    ("verify_attn H=8 R=1 32k", "2x torch", t_va_torch),
    ("verify_attn H=64 R=8 32k", "45% of 989 TFLOP/s",
     t_va_peak(64, 8, 0.45)),
    ("verify_attn (wgmma), few requests, 4k",
     "1.15x FlashInfer fa3's no-mask bound", t_va_few),
    ("verify_attn (wgmma), compute-bound shapes", "660 TFLOP/s", t_va_660),
    ("verify_attn (portable) H=8 R=1 32k", "350 TFLOP/s", t_pt),
    ("verify_attn over e4m3, MATH=bf16, past 32k",
     "no slower than the bf16 cache", t_fp8_a),
    ("verify_attn over e4m3, MATH=bf16, past 32k",
     "1.3x FlashInfer fa3's e4m3 cascade", t_fp8_cascade),
    ("verify_attn over e4m3, MATH=e4m3, compute-bound shapes past 32k",
     "1,100 TFLOP/s", t_fp8_b_peak),
    ("verify_attn over e4m3, MATH=e4m3, 257 and 513 rows past 32k",
     "1.6x the bf16 cache", t_fp8_b_speed),
    ("verify_attn (portable) over e4m3, MATH=e4m3, H=8 R=1 257 rows 32k",
     "450 TFLOP/s", t_fp8_pt_peak),
    ("verify_attn (portable) over e4m3, past 32k",
     "5x SGLang's Triton e4m3 verify", t_fp8_pt_triton),
    ("verify_attn PAGE 1, bf16 and e4m3, past 32k",
     "within 5% of PAGE 64", t_fp8_page1),
]


def block_targets(runs):
    rows = []
    for what, target, get in TARGETS:
        name, reached, met = get(runs)
        rows.append([what, target, reached, runs[name]["record"]["commit"],
                     met])
    return table(["what", "target", "reached", "commit", ""], rows)


def generate(runs, name):
    words = name.split()
    if words == ["runs"]:
        return block_runs(runs)
    if words == ["targets"]:
        return block_targets(runs)
    if len(words) == 3 and words[0] == "kernel":
        return block_kernel(runs, words[1], words[2])
    if len(words) == 4 and words[0] == "kernel":
        return block_kernel(runs, words[1], words[2], words[3])
    sys.exit("perf_tables: no table named %r" % name)


def regenerate(text, runs):
    """The document with every table replaced by its output."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        out.append(lines[i])
        i += 1
        if not m:
            continue
        while i < len(lines) and lines[i] != END:
            i += 1
        if i == len(lines):
            sys.exit("perf_tables: %r has no %s" % (m.group(1), END))
        out += generate(runs, m.group(1))
        out.append(END)
        i += 1
    return "\n".join(out)


# the fields every file of one record must share, and the lists joined
SAME = ("tool", "version", "mode", "device", "arch", "target", "nvrtc")
JOINED = ("kernels", "baselines", "baseline_runs", "cases", "load",
          "targets", "overhead")


def merge_runs(paths, record):
    """One report of several --json-out files of one build on one GPU."""
    reports = []
    for path in paths:
        with open(path) as f:
            reports.append((path, json.load(f)))
    first_path, first = reports[0]
    merged = dict(first)
    for path, d in reports[1:]:
        for k in SAME:
            if d.get(k) != first.get(k):
                raise ValueError("%s: %s is %r where %s has %r" % (
                    path, k, d.get(k), first_path, first.get(k)))
    for k in JOINED:
        if any(k in d for _, d in reports):
            merged[k] = [r for _, d in reports for r in d.get(k) or []]
    notes = []
    for _, d in reports:
        for n in d.get("notes") or []:
            if n not in notes:
                notes.append(n)
    merged["notes"] = notes
    merged["record"] = record
    return merged


def record_main(a):
    rec = {"commit": a.commit, "date": a.date, "command": a.command,
           "source": a.source}
    for k, v in rec.items():
        if not v:
            sys.exit("perf_tables: --record needs --%s" % k)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", a.date):
        sys.exit("perf_tables: --date %r is not YYYY-MM-DD" % a.date)
    if a.only:
        rec["only"] = a.only
    out, ins = a.record, a.files
    if os.path.exists(out):
        sys.exit("perf_tables: %s exists; a record is written once" % out)
    try:
        merged = merge_runs(ins, rec)
    except (OSError, ValueError) as e:
        sys.exit("perf_tables: %s" % e)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
    print("perf_tables: %s: %d rows of %d runs" % (
        out, len(merged.get("kernels") or []), len(ins)))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true",
                      help="exit 1 where a table is not this script's output")
    mode.add_argument("--write", action="store_true",
                      help="replace every table with this script's output")
    mode.add_argument("--record", metavar="OUT.json",
                      help="one record of the runs FILE...")
    ap.add_argument("--bench-dir", help="the JSON files (default: bench/ "
                    "beside the document)")
    for k in ("commit", "date", "command", "source", "only"):
        ap.add_argument("--" + k, help="--record: the record's " + k)
    ap.add_argument("files", nargs="+", metavar="FILE",
                    help="the document; with --record, the runs' JSON")
    a = ap.parse_args()
    if a.record is not None:
        return record_main(a)
    if len(a.files) != 1:
        ap.error("--check and --write take one document")
    a.doc = a.files[0]
    bench_dir = a.bench_dir or os.path.join(os.path.dirname(a.doc), "bench")
    with open(a.doc, encoding="utf-8") as f:
        text = f.read()
    new = regenerate(text, load_runs(bench_dir))
    if a.write:
        if new != text:
            with open(a.doc, "w", encoding="utf-8") as f:
                f.write(new)
        return 0
    if new != text:
        sys.stdout.writelines(difflib.unified_diff(
            text.splitlines(True), new.splitlines(True), a.doc,
            a.doc + " (from docs/bench)"))
        print("perf_tables: %s's tables are not what docs/bench makes; run "
              "python3 tools/dev/perf_tables.py --write %s" % (a.doc, a.doc),
              file=sys.stderr)
        return 1
    print("perf_tables: %s: every table is current" % a.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
