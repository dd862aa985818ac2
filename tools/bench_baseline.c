/*
 * bench_baseline.c: kdtree-bench's torch baselines (see bench_suite.h):
 * today's way of doing each kernel's work, timed by a Python script in the
 * same session, so that the report can put it beside ours.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_ctx.h"

/* Runs one baseline script and flattens whatever JSON it writes into
 * "ROW\tkernel\tconfig\tus\tlabel" and "NOTE\ttext" lines (or one
 * "ERROR\t..." line), so that this file needs no JSON parser.  The script
 * is run as `script --json FILE [--quick]` (the baselines' convention: JSON
 * into FILE, progress on stdout); JSON printed on stdout is accepted too.
 * Rows: a list, or an object's "cases"/"rows"/"results"; an object's
 * "notes" (strings: what was skipped and why) become notes.  A row's time
 * is the first of baseline_us, median_us, us, time_us (or *_ms); its
 * kernel "kernel" or "name"; its config "config"/"shape", else its other
 * scalar fields ("H=8 R=1 past_len=4096 rows=65"); its label, the name
 * the report shows it under, "label" (default "torch"). */
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
    "                     and a not in ('flops', 'bytes', 'tflops', 'baseline', 'label'))\n"
    "    if isinstance(c, dict): c = ' '.join('%s=%s' % kv for kv in c.items())\n"
    "    c = str(c).replace('\\t', ' ').replace('\\n', ' ')\n"
    "    lab = ' '.join(str(r.get('label') or 'torch').split())\n"
    "    print('ROW\\t%s\\t%s\\t%.4f\\t%s' % (k, c, float(us), lab))\n";

/* Writes the config strings of the rows of `kernel` measured so far, one a
 * line, into a temp file whose name goes into `out`: the cases a baseline
 * script is to time (its --configs).  0, or -1 when there are none. */
static int
write_configs(bench_ctx *b, const char *kernel, char *out, size_t size)
{
    int fd, n = 0;
    FILE *f;
    snprintf(out, size, "/tmp/kdtree-bench-configs.XXXXXX");
    if ((fd = mkstemp(out)) < 0)
        return -1;
    if (!(f = fdopen(fd, "w"))) {
        close(fd);
        unlink(out);
        return -1;
    }
    for (int i = 0; i < b->n_rows; i++)
        if (strcmp(b->rows[i].kernel, kernel) == 0) {
            fprintf(f, "%s\n", b->rows[i].config);
            n++;
        }
    fclose(f);
    if (!n)
        unlink(out);
    return n ? 0 : -1;
}

/* Runs `script`; with `kernel`, on the cases of it this run measured. */
static void
run_baseline(bench_ctx *b, const char *tools_dir, const char *script,
             const char *kernel)
{
    char path[4096], cmd[8192], line[1024], configs[64] = "";
    FILE *f, *p;
    int got = 0;
    snprintf(path, sizeof path, "%s/%s", tools_dir, script);
    if (access(path, R_OK) != 0) {
        bench_note(b, "baseline %s: not found (%s)", script, path);
        return;
    }
    /* The flattener goes through a temp file: no quoting of Python code in
     * a shell command. */
    char tmp[] = "/tmp/kdtree-bench-flatten.XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0 || !(f = fdopen(fd, "w"))) {
        bench_note(b, "baseline %s: cannot write a temp file", script);
        return;
    }
    fputs(flatten_py, f);
    fclose(f);
    if (kernel && write_configs(b, kernel, configs, sizeof configs) != 0)
        configs[0] = 0;
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s'%s%s%s%s", tmp, path,
             b->quick ? " --quick" : "", configs[0] ? " --configs '" : "",
             configs, configs[0] ? "'" : "");
    fprintf(stderr, "kdtree-bench: baseline %s\n", script);
    p = popen(cmd, "r");
    if (!p) {
        bench_note(b, "baseline %s: cannot run python3", script);
        unlink(tmp);
        if (configs[0])
            unlink(configs);
        return;
    }
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "ROW\t", 4) == 0 && b->n_base < MAX_BASE) {
            /* kernel, config (may be empty), us, label */
            char *f[4], *rest = line + 4;
            int nf = 0;
            while (nf < 4 && rest)
                f[nf++] = strsep(&rest, "\t");
            if (nf < 4 || !*f[0] || !*f[2])
                continue;
            base_row *r = &b->base[b->n_base];
            snprintf(r->script, sizeof r->script, "%s", script);
            snprintf(r->kernel, sizeof r->kernel, "%s", f[0]);
            snprintf(r->config, sizeof r->config, "%s", f[1]);
            r->us = atof(f[2]);
            snprintf(r->label, sizeof r->label, "%s", *f[3] ? f[3] : "torch");
            b->n_base++;
            got++;
        } else if (strncmp(line, "NOTE\t", 5) == 0) {
            bench_note(b, "baseline %s: %s", script, line + 5);
        } else if (strncmp(line, "ERROR\t", 6) == 0) {
            bench_note(b, "baseline %s: %s", script, line + 6);
        }
    }
    if (pclose(p) != 0)
        bench_note(b, "baseline %s: python3 missing or failed", script);
    else if (!got)
        bench_note(b, "baseline %s: no rows", script);
    unlink(tmp);
    if (configs[0])
        unlink(configs);
}

void
bench_run_baselines(bench_ctx *b, const char *tools_dir, int topk, int attn)
{
    if (topk)
        run_baseline(b, tools_dir, "baseline_topk.py", NULL);
    if (attn)
        run_baseline(b, tools_dir, "baseline_attn.py", "verify_attn");
}
