"""doc_paths.py SRCDIR [BUILDDIR]: every file the documents point to exists.

The documents are README.md, NOTES.md, docs/*.md and cache/README.md.  A
pointer is a Markdown link's target (relative to its document) or the
first word of a `code span` that names a path of the repository: one
under a top-level folder (src/, tools/, tests/, docs/, ...) or one of the
top-level files, or one under a folder of src/ written as an include is
(cache/cache.h, jit/registry.c).  It exists when it is in the source
tree (for the second kind, in src/), or in the build tree (a built
program, a generated file), or names a program whose
source is beside it (tests/gpu_tree_accept: tests/gpu_tree_accept.c); a
glob (tools/baseline_*.py) must match something.  A word with a
placeholder in it (<kernel>, $OUT) is a pattern, not a path, and is left
alone.  Prints each missing pointer with its document and line; exit 1 if
any.
"""
import glob
import os
import re
import sys

FOLDERS = ("src", "tools", "tests", "docs", "kernels_src", "include", "ref",
           "python", "am", "build-aux", "cache", ".ci")
SRC_FOLDERS = ("base", "cuda", "cache", "jit", "runtime", "kernels")
TOP_FILES = ("README.md", "NOTES.md", "Makefile.am", "configure.ac",
             "autogen.sh", "bench.sh", "check.sh", "kdtree.pc.in")
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def documents(src):
    docs = ["README.md", "NOTES.md", "cache/README.md"]
    docs += sorted(os.path.relpath(p, src)
                   for p in glob.glob(os.path.join(src, "docs", "*.md")))
    return [d for d in docs if os.path.exists(os.path.join(src, d))]


def is_repo_path(word):
    word = word[2:] if word.startswith("./") else word
    head = word.split("/", 1)[0]
    return (("/" in word and head in FOLDERS + SRC_FOLDERS)
            or word in TOP_FILES), word


def exists(path, src, build):
    if any(c in path for c in "<>{}$"):
        return True
    roots = [src, build]
    if path.split("/", 1)[0] in SRC_FOLDERS:
        roots.append(os.path.join(src, "src"))
    for root in roots:
        full = os.path.join(root, path)
        if any(c in path for c in "*?["):
            if glob.glob(full):
                return True
        elif os.path.exists(full) or os.path.exists(full + ".c"):
            return True
    return False


def pointers(doc, text):
    """(line, path) of every pointer of a document, repository-relative."""
    for n, line in enumerate(text.split("\n"), 1):
        for m in SPAN.finditer(line):
            word = m.group(1).split()[0] if m.group(1).split() else ""
            word = re.sub(r"(:\d+(-\d+)?)+$", "", word.rstrip(".,;:)"))
            ok, word = is_repo_path(word)
            if ok:
                yield n, word
        for m in LINK.finditer(line):
            target = m.group(1).split("#")[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            yield n, os.path.normpath(
                os.path.join(os.path.dirname(doc), target))


def main():
    src = sys.argv[1]
    build = sys.argv[2] if len(sys.argv) > 2 else src
    missing = 0
    for doc in documents(src):
        with open(os.path.join(src, doc), encoding="utf-8") as f:
            text = f.read()
        for n, path in pointers(doc, text):
            if not exists(path, src, build):
                print("%s:%d: %s does not exist" % (doc, n, path))
                missing += 1
    if missing:
        print("doc_paths: %d pointer%s to nothing" %
              (missing, "" if missing == 1 else "s"), file=sys.stderr)
        return 1
    print("doc_paths: every pointer names a file that exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
