"""Loading libkdtree, the cdef taken from kdtree.h, and the ABI check.
Host tests: no GPU needed."""
import os
import re
import subprocess
import sys
import tempfile

import pytest

import _util
import kdtree_jit
from kdtree_jit import _lib

SRC_ROOT = os.path.dirname(os.path.dirname(_util.HERE))


def header_text():
    with open(_util.binding().header_path) as f:
        return f.read()


def test_loads_and_reports_versions():
    b = _util.binding()
    assert os.path.basename(b.library_path).startswith("libkdtree")
    assert re.match(r"^\d+\.\d+\.\d+$", kdtree_jit.version)
    assert kdtree_jit.abi_version() == _lib.EXPECTED_ABI
    assert kdtree_jit.max_qlen() >= 65


def test_cdef_parses_on_its_own():
    import cffi
    cdef = _lib.extract_cdef(header_text())
    assert "/*" not in cdef and "//" not in cdef
    assert "#" not in cdef  # no macros in the declaration region
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    assert ffi.sizeof("kdtree_cache_stats") == \
        _util.binding().lib.kdtree_cache_stats_size()


def test_every_declared_function_resolves():
    b = _util.binding()
    names = _lib.declared_functions(b.cdef)
    assert len(names) >= 20
    missing = []
    for n in names:
        try:
            getattr(b.lib, n)
        except AttributeError:
            missing.append(n)
    assert not missing, "declared but not exported: %s" % missing


def test_declarations_match_exports_list():
    # tests/exports.txt is the checked-in list of the library's symbols:
    # the binding must declare exactly those.
    path = os.path.join(SRC_ROOT, "tests", "exports.txt")
    if not os.path.exists(path):
        pytest.skip("no tests/exports.txt in this tree")
    with open(path) as f:
        exported = {l.strip() for l in f if l.strip()}
    declared = set(_lib.declared_functions(_util.binding().cdef))
    assert declared == exported, (sorted(declared - exported),
                                  sorted(exported - declared))


def test_enums_come_from_the_header():
    b = _util.binding()
    text = header_text()
    for name, value in re.findall(r"(KDTREE_ERROR_\w+) = (-\d+)", text):
        assert getattr(b.lib, name) == int(value)
        assert kdtree_jit.status_name(int(value)) == name
    assert kdtree_jit.status_name(0) == "KDTREE_OK"
    assert kdtree_jit.status_name(-9999) == "KDTREE_ERROR_UNKNOWN"
    assert b.lib.KDTREE_DTYPE_BF16 == 1


def test_missing_markers_are_refused():
    with pytest.raises(ValueError, match="KDTREE_CDEF_BEGIN"):
        _lib.extract_cdef("int kdtree_x(void);")


def test_abi_mismatch_is_refused(monkeypatch=None):
    path = _util.binding().library_path
    saved = _lib.EXPECTED_ABI
    _lib.EXPECTED_ABI = saved + 41
    try:
        with pytest.raises(_lib.AbiMismatch,
                           match=r"ABI version %d but this kdtree_jit was "
                                 r"written for ABI version %d"
                                 % (saved, saved + 41)):
            _lib.load(library=path)
    finally:
        _lib.EXPECTED_ABI = saved


def test_header_from_another_abi_is_refused():
    b = _util.binding()
    text = header_text().replace(
        "#define KDTREE_ABI_VERSION %d" % _lib.EXPECTED_ABI,
        "#define KDTREE_ABI_VERSION %d" % (_lib.EXPECTED_ABI + 7))
    with tempfile.NamedTemporaryFile("w", suffix=".h", delete=False) as f:
        f.write(text)
    try:
        with pytest.raises(_lib.AbiMismatch, match="declares ABI version"):
            _lib.load(library=b.library_path, header=f.name)
    finally:
        os.unlink(f.name)


def test_missing_library_says_where_it_looked():
    with pytest.raises(_lib.LibraryNotFound,
                       match=r"/nonexistent/libkdtree.so \(no such file\)"):
        _lib.load(library="/nonexistent/libkdtree.so")


def test_not_a_library_is_refused():
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as f:
        f.write(b"not an ELF file")
    try:
        with pytest.raises(_lib.LibraryNotFound, match="could not be loaded"):
            _lib.load(library=f.name)
    finally:
        os.unlink(f.name)


def child_env(**extra):
    # Keep the caller's PYTHONPATH: cffi may live there (the GPU host's
    # wheels do).
    path = os.pathsep.join(p for p in (os.path.dirname(_util.HERE),
                                       os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def test_environment_variable_is_obeyed_in_a_fresh_process():
    env = child_env(KDTREE_LIBRARY="/nonexistent/libkdtree.so")
    p = subprocess.run(
        [sys.executable, "-c", "import kdtree_jit; kdtree_jit.version"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        universal_newlines=True)
    assert p.returncode != 0
    assert "LibraryNotFound" in p.stderr
    assert "KDTREE_LIBRARY" in p.stderr  # the message says how to fix it


def test_import_does_not_load_the_library():
    env = child_env(KDTREE_LIBRARY="/nonexistent/libkdtree.so")
    p = subprocess.run([sys.executable, "-c", "import kdtree_jit"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.returncode == 0, p.stderr


def test_cache_stats_fields():
    s = kdtree_jit.cache_stats()
    assert set(s) == {"memory_hits", "disk_hits", "compiles", "loads",
                      "disk_misses", "disk_rejects", "compile_ms", "load_ms",
                      "disk_ms"}
    kdtree_jit.cache_stats_reset()
    assert kdtree_jit.cache_stats()["compiles"] == 0


def test_kernel_registry():
    names = kdtree_jit.kernels()
    assert names == ["draft_topk", "build_ddtree", "verify_attn",
                     "tree_accept"]
    for n in names:
        assert "=" in kdtree_jit.default_shape(n)
        assert ".." in kdtree_jit.kernel_constants(n) or \
            "|" in kdtree_jit.kernel_constants(n)
