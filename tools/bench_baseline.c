/*
 * bench_baseline.c: kdtree-bench's baselines (see bench_suite.h): the
 * ways of doing each kernel's work without this library (torch;
 * FlashInfer where it imports), timed by a Python script in the same run,
 * so that the report can put them beside ours, and what came of each
 * script's run.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_ctx.h"

/* Runs one baseline script and flattens whatever JSON it writes into
 * "ROW\tkernel\tconfig\tus\tlabel\tmhz" and "NOTE\ttext" lines (or one
 * "ERROR\t..." line), so that this file needs no JSON parser.  The script
 * is run as `script --json FILE [--quick]` (the baselines' convention: JSON
 * into FILE, progress on stdout); JSON printed on stdout is accepted too.
 * Rows: a list, or an object's "cases"/"rows"/"results"; an object's
 * "notes" (strings: what was skipped and why) become notes.  A row's time
 * is the first of baseline_us, median_us, us, time_us (or *_ms); its
 * kernel "kernel" or "name"; its config "config"/"shape", else its other
 * scalar fields ("H=8 R=1 past_len=4096 rows=65"); its label, the name
 * the report shows it under, "label" (default "torch"); its SM clock in
 * MHz, "sm_mhz" (nan when not given). */
static const char flatten_py[] =
    "import json, os, subprocess, sys, tempfile\n"
    "script = sys.argv[1]\n"
    "fd, out = tempfile.mkstemp(suffix='.json'); os.close(fd)\n"
    "p = subprocess.run([sys.executable, script, '--json', out] + sys.argv[2:],\n"
    "                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,\n"
    "                   universal_newlines=True)\n"
    "text = open(out).read(); os.unlink(out)\n"
    "if p.returncode == 77:\n"
    "    print('ERROR\\tskipped: ' + (p.stderr.strip().splitlines() or [''])[-1]); sys.exit(0)\n"
    "if p.returncode != 0:\n"
    "    last = (p.stderr.strip().splitlines() or ['exit %d' % p.returncode])[-1]\n"
    "    print('ERROR\\texit %d: %s' % (p.returncode, last)); sys.exit(0)\n"
    "data = None\n"
    "for src in (text, p.stdout):\n"
    "    try:\n"
    "        data = json.loads(src); break\n"
    "    except ValueError:\n"
    "        pass\n"
    "if data is None:\n"
    "    for line in reversed(p.stdout.splitlines()):\n"
    "        try:\n"
    "            data = json.loads(line); break\n"
    "        except ValueError:\n"
    "            pass\n"
    "if data is None:\n"
    "    print('ERROR\\tno JSON written'); sys.exit(0)\n"
    "rows = data\n"
    "if isinstance(data, dict):\n"
    "    rows = data.get('cases') or data.get('rows') or data.get('results') or [data]\n"
    "    for n in data.get('notes') or []:\n"
    "        print('NOTE\\t' + ' '.join(str(n).split()))\n"
    "TIME = ('baseline_us', 'median_us', 'us', 'time_us')\n"
    "def get(r, *keys):\n"
    "    for k in keys:\n"
    "        if r.get(k) is not None: return r[k]\n"
    "for r in rows:\n"
    "    if not isinstance(r, dict): continue\n"
    "    us = get(r, *TIME)\n"
    "    if us is None:\n"
    "        ms = get(r, 'median_ms', 'ms')\n"
    "        us = None if ms is None else 1e3 * float(ms)\n"
    "    if us is None: continue\n"
    "    k = str(get(r, 'kernel', 'name') or os.path.basename(script))\n"
    "    c = get(r, 'config', 'shape', 'case')\n"
    "    if c is None:\n"
    "        c = ' '.join('%s=%s' % (a, b) for a, b in r.items()\n"
    "                     if isinstance(b, (int, str)) and not isinstance(b, bool)\n"
    "                     and a not in ('kernel', 'name') and not a.endswith(('_us', '_ms', '_error'))\n"
    "                     and a not in ('flops', 'bytes', 'tflops', 'baseline', 'label', 'sm_mhz'))\n"
    "    if isinstance(c, dict): c = ' '.join('%s=%s' % kv for kv in c.items())\n"
    "    c = str(c).replace('\\t', ' ').replace('\\n', ' ')\n"
    "    lab = ' '.join(str(r.get('label') or 'torch').split())\n"
    "    mhz = r.get('sm_mhz')\n"
    "    mhz = float(mhz) if isinstance(mhz, (int, float)) else float('nan')\n"
    "    print('ROW\\t%s\\t%s\\t%.4f\\t%s\\t%.0f' % (k, c, float(us), lab, mhz))\n";

/* Writes the config strings of the rows of `kernel` measured so far, one a
 * line, into a temp file whose name goes into `out`: the cases a baseline
 * script is to time (its --configs).  0; 1 when there are none (no file);
 * -1 when the file cannot be written. */
static int
write_configs(bench_ctx *b, const char *kernel, char *out, size_t size)
{
    int fd, n = 0;
    FILE *f;
    for (int i = 0; i < b->n_rows; i++)
        n += strcmp(b->rows[i].kernel, kernel) == 0;
    if (!n)
        return 1;
    snprintf(out, size, "/tmp/kdtree-bench-configs.XXXXXX");
    if ((fd = mkstemp(out)) < 0)
        return -1;
    if (!(f = fdopen(fd, "w"))) {
        close(fd);
        unlink(out);
        return -1;
    }
    for (int i = 0; i < b->n_rows; i++)
        if (strcmp(b->rows[i].kernel, kernel) == 0)
            fprintf(f, "%s\n", b->rows[i].config);
    if (fclose(f) != 0) {
        unlink(out);
        return -1;
    }
    return 0;
}

/* Records the outcome of a run (the first one said wins: a skip is not
 * overwritten by the exit status that follows it); also on stderr. */
static void
outcome(base_run *run, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
outcome(base_run *run, const char *fmt, ...)
{
    va_list ap;
    if (run->outcome[0])
        return;
    va_start(ap, fmt);
    vsnprintf(run->outcome, sizeof run->outcome, fmt, ap);
    va_end(ap);
    fprintf(stderr, "kdtree-bench: baseline %s: %s\n", run->script,
            run->outcome);
}

/* One "kernel\tconfig\tus\tlabel" line of the flattener (config may be
 * empty) into a base row. */
static void
add_row(bench_ctx *b, base_run *run, char *line)
{
    char *f[5], *rest = line;
    int nf = 0;
    base_row *r;
    while (nf < 5 && rest)
        f[nf++] = strsep(&rest, "\t");
    if (nf < 4 || !*f[0] || !*f[2] || b->n_base == MAX_BASE)
        return;
    r = &b->base[b->n_base++];
    _Static_assert(sizeof r->script == sizeof run->script, "script names");
    memcpy(r->script, run->script, sizeof r->script);
    snprintf(r->kernel, sizeof r->kernel, "%s", f[0]);
    snprintf(r->config, sizeof r->config, "%s", f[1]);
    r->us = atof(f[2]);
    snprintf(r->label, sizeof r->label, "%s", *f[3] ? f[3] : "torch");
    r->mhz = nf > 4 ? strtod(f[4], NULL) : NAN; /* "nan" reads as NAN */
    r->matched = 0;
    run->rows++;
}

/* Runs the flattener on the script at `path` (with --configs FILE when
 * `configs` is not empty); the run's outcome says what came of it. */
static void
run_flattener(bench_ctx *b, base_run *run, const char *path,
              const char *configs)
{
    char cmd[8192], line[1024];
    FILE *f, *p;
    /* The flattener goes through a temp file: no quoting of Python code in
     * a shell command. */
    char tmp[] = "/tmp/kdtree-bench-flatten.XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        if (fd >= 0)
            close(fd);
        outcome(run, "failed: cannot write a temp file");
        return;
    }
    fputs(flatten_py, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s'%s%s%s%s", tmp, path,
             b->quick ? " --quick" : "", configs[0] ? " --configs '" : "",
             configs, configs[0] ? "'" : "");
    p = popen(cmd, "r");
    if (!p) {
        outcome(run, "failed: cannot run python3");
        unlink(tmp);
        return;
    }
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "ROW\t", 4) == 0)
            add_row(b, run, line + 4);
        else if (strncmp(line, "NOTE\t", 5) == 0)
            bench_note(b, "baseline %s: %s", run->script, line + 5);
        else if (strncmp(line, "ERROR\tskipped", 13) == 0)
            outcome(run, "%s", line + 6);
        else if (strncmp(line, "ERROR\t", 6) == 0)
            outcome(run, "failed: %s", line + 6);
    }
    if (pclose(p) != 0)
        outcome(run, "failed: python3 missing or failed");
    else if (!run->rows)
        outcome(run, "failed: no rows in what it wrote");
    else
        outcome(run, "ok");
    unlink(tmp);
}

/* Runs `script` on the cases of `kernel` this run measured (its own
 * grid when it measured none, as without a GPU); when --only left no case
 * of `kernel`, not at all: a baseline of cases nobody asked for would be
 * time spent on nothing the report shows. */
static void
run_baseline(bench_ctx *b, const char *tools_dir, const char *script,
             const char *kernel)
{
    char path[4096], configs[64] = "";
    base_run *run;
    if (b->n_runs == MAX_BASE_RUNS)
        return;
    run = &b->runs[b->n_runs++];
    memset(run, 0, sizeof *run);
    snprintf(run->script, sizeof run->script, "%s", script);
    snprintf(path, sizeof path, "%s/%s", tools_dir, script);
    fprintf(stderr, "kdtree-bench: baseline %s\n", script);
    if (access(path, R_OK) != 0) {
        outcome(run, "failed: not found (%s)", path);
        return;
    }
    int st = write_configs(b, kernel, configs, sizeof configs);
    if (st != 0)
        configs[0] = 0;
    if (st == 1 && b->n_only) {
        outcome(run, "skipped: --only left no %s case", kernel);
        return;
    }
    if (st < 0) {
        outcome(run, "failed: cannot write its cases to a temp file");
        return;
    }
    run_flattener(b, run, path, configs);
    if (configs[0])
        unlink(configs);
}

void
bench_run_baselines(bench_ctx *b, const char *tools_dir, int topk, int attn)
{
    if (topk)
        run_baseline(b, tools_dir, "baseline_topk.py", "draft_topk");
    if (attn)
        run_baseline(b, tools_dir, "baseline_attn.py", "verify_attn");
}
