"""Finding and loading libkdtree through cffi's ABI mode.

The cdef is not written here: it is the region of ``kdtree.h`` between the
``KDTREE_CDEF_BEGIN`` and ``KDTREE_CDEF_END`` markers, with comments
stripped, so the C header stays the one source of truth.  The header is
found, in order, at ``$KDTREE_HEADER``, in this package (copied there when
the package is built), in the source tree this package sits in, or in the
include directory beside the loaded library.

The library is found at ``$KDTREE_LIBRARY``, else in this package (where
``pip install`` builds it), in the build tree (``$KDTREE_BUILD_DIR/.libs``
or the checkout this package sits in), or where the dynamic loader finds
``libkdtree.so.1``.

Once loaded, the library is told which of ``sys.path`` hold NVIDIA's
packages (``nvidia/``), so that it finds NVRTC in the nvidia-cuda-nvrtc
wheels with no configuration, and, when the kdtree-jit-cubin package is
installed (``kdtree_jit_cubin``), that its directory of compiled kernels is
a read-only cache layer (``kdtree_add_cache_layer()``), searched before the
user's cache.
"""

import ctypes.util
import importlib
import importlib.util
import os
import re
import sys
import threading

#: The KDTREE_ABI_VERSION this binding was written against.  The loaded
#: library must report the same from kdtree_abi_version().
EXPECTED_ABI = 3

_HERE = os.path.dirname(os.path.abspath(__file__))
_SRC_ROOT = os.path.dirname(os.path.dirname(_HERE))  # python/kdtree_jit -> repo
_BEGIN = "/* KDTREE_CDEF_BEGIN */"
_END = "/* KDTREE_CDEF_END */"


class LibraryNotFound(ImportError):
    """No libkdtree could be found or loaded; the message lists where it
    was looked for."""


class AbiMismatch(ImportError):
    """The loaded libkdtree was built for another ABI than this binding."""


def extract_cdef(header_text):
    """The cffi cdef held by a kdtree.h: its marked region, without
    comments.  Raises ValueError when the markers are missing."""
    begin = header_text.find(_BEGIN)
    end = header_text.find(_END)
    if begin < 0 or end < 0 or end < begin:
        raise ValueError("kdtree.h has no %s ... %s region" % (_BEGIN, _END))
    region = header_text[begin + len(_BEGIN):end]
    region = re.sub(r"/\*.*?\*/", " ", region, flags=re.S)
    region = re.sub(r"//[^\n]*", "", region)
    return region


def declared_functions(cdef):
    """Names of the functions a cdef declares (for the sync test)."""
    return re.findall(r"\b(kdtree_\w+)\s*\(", cdef)


def header_abi_version(header_text):
    m = re.search(r"#define\s+KDTREE_ABI_VERSION\s+(\d+)", header_text)
    return int(m.group(1)) if m else None


def header_candidates(library_path=None):
    out = []
    env = os.environ.get("KDTREE_HEADER")
    if env:
        out.append(env)
    out.append(os.path.join(_HERE, "kdtree.h"))
    out.append(os.path.join(_SRC_ROOT, "include", "kdtree.h"))
    if library_path:
        libdir = os.path.dirname(os.path.realpath(library_path))
        # <prefix>/lib[/triplet]/libkdtree.so -> <prefix>/include
        for up in ("..", os.path.join("..", "..")):
            out.append(os.path.normpath(os.path.join(libdir, up, "include",
                                                      "kdtree.h")))
        # The build tree: <builddir>/.libs/libkdtree.so -> srcdir unknown;
        # a configure'd tree has it at <builddir>/../src only in-tree.
        out.append(os.path.normpath(os.path.join(libdir, "..", "src",
                                                 "kdtree.h")))
    out += ["/usr/local/include/kdtree.h", "/usr/include/kdtree.h"]
    return out


def library_candidates():
    out = []
    env = os.environ.get("KDTREE_LIBRARY")
    if env:
        return [env]  # an explicit choice is never second-guessed
    out.append(os.path.join(_HERE, "libkdtree.so"))
    build = os.environ.get("KDTREE_BUILD_DIR")
    if build:
        out.append(os.path.join(build, ".libs", "libkdtree.so"))
    out.append(os.path.join(_SRC_ROOT, ".libs", "libkdtree.so"))
    found = ctypes.util.find_library("kdtree")
    if found:
        out.append(found)
    out += ["libkdtree.so.1", "libkdtree.so"]
    return out


def nvidia_package_dirs():
    """The entries of sys.path that hold NVIDIA's pip packages (an
    ``nvidia/`` directory), in import order."""
    out = []
    for p in sys.path:
        p = os.path.abspath(p or os.curdir)
        if p not in out and os.path.isdir(os.path.join(p, "nvidia")):
            out.append(p)
    return out


def _tell_site_packages(ffi, lib):
    # Only before NVRTC's first load; a second binding loaded into the same
    # process finds it done, which is fine.
    dirs = ":".join(d for d in nvidia_package_dirs() if ":" not in d)
    if dirs:
        lib.kdtree_set_site_packages(dirs.encode())


#: The companion package of compiled kernels, and its import name.
CUBIN_PACKAGE = "kdtree-jit-cubin"
_CUBIN_MODULE = "kdtree_jit_cubin"


def _add_cubin_layer(ffi, lib):
    """Adds the kdtree-jit-cubin package's layer to the library's search
    path.  Returns (module or None, why it was not added or None)."""
    if importlib.util.find_spec(_CUBIN_MODULE) is None:
        return None, None
    # Installed: a failure to import it is said, not taken for absence.
    try:
        module = importlib.import_module(_CUBIN_MODULE)
    except Exception as e:  # noqa: BLE001 -- any failure of its import
        return None, "%s cannot be imported: %s" % (_CUBIN_MODULE, e)
    try:
        add = lib.kdtree_add_cache_layer
    except AttributeError:
        return module, "the loaded libkdtree has no kdtree_add_cache_layer()"
    try:
        name = "%s %s" % (CUBIN_PACKAGE, module.build()["version"])
    except (OSError, ValueError, KeyError) as e:
        return module, "its layer.json cannot be read: %s" % e
    st = add(module.LAYER.encode(), name.encode())
    if st:
        return module, ffi.string(lib.kdtree_last_error()).decode()
    return module, None


def _refused(layer):
    """Why the library's trust rule (docs/cache.md, "Trust") refuses the
    layer, or None: each of the layer, its v1/ and its entries must be
    owned by this user or root and not writable by group or others (pip
    under a umask of 002 leaves them group-writable)."""
    euid = os.geteuid()
    v1 = os.path.join(layer, "v1")
    try:
        paths = [layer, v1] + [os.path.join(v1, n) for n in os.listdir(v1)]
        for path in paths:
            st = os.stat(path)
            if st.st_uid not in (euid, 0):
                return "%s is owned by uid %d" % (path, st.st_uid)
            if st.st_mode & 0o022:
                return "%s is writable by group or others (mode %o); " \
                    "chmod -R go-w %s" % (path, st.st_mode & 0o777, layer)
    except OSError as e:
        return str(e)
    return None


def cubin_info(b, nvrtc):
    """What kdtree_jit.info() says of the kdtree-jit-cubin layer: None when
    the package is not installed, else its version, path, how many entries
    and aliases it holds, the NVRTC build that compiled them, and whether
    they serve this process (`nvrtc` is info()'s NVRTC record: an entry's
    key names the NVRTC build, so another NVRTC misses them all)."""
    module = b.cubin
    if module is None:
        return None if b.cubin_error is None else {
            "package": CUBIN_PACKAGE, "added": False, "serves": False,
            "note": "not added: %s" % b.cubin_error}
    out = {"package": CUBIN_PACKAGE, "path": module.LAYER, "added":
           b.cubin_error is None}
    try:
        built = module.build()
    except (OSError, ValueError) as e:
        built = {}
        out["note"] = "layer.json cannot be read: %s" % e
    out.update(module.scan(module.LAYER))
    out["version"] = built.get("version")
    out["nvrtc"] = built.get("nvrtc")
    version = b.ffi.string(b.lib.kdtree_version_string()).decode()
    here = nvrtc["detail"] if nvrtc["loaded"] else None
    refused = _refused(module.LAYER)
    if b.cubin_error is not None:
        serves, note = False, "not added: %s" % b.cubin_error
    elif refused:
        serves, note = False, "the library refuses it: %s" % refused
    elif os.environ.get("KDTREE_CACHE") == "off":
        serves, note = False, "KDTREE_CACHE=off: no layer is read"
    elif not built:
        serves, note = False, out["note"]
    elif built.get("kdtree_jit") != version:
        serves, note = False, (
            "built for kdtree-jit %s, this library is %s: its keys differ; "
            "install the kdtree-jit-cubin of this version"
            % (built.get("kdtree_jit"), version))
    elif here is None:
        serves, note = True, (
            "no NVRTC in this process: its shapes load through their "
            "aliases; any other shape fails")
    elif here == built.get("nvrtc"):
        serves, note = True, "built by this process's NVRTC"
    else:
        serves, note = False, (
            "built by NVRTC %s, this process's is %s: its entries miss and "
            "kernels compile here; `pip install %s[nvrtc]` installs the "
            "NVRTC it was built by" % (built.get("nvrtc"), here,
                                       CUBIN_PACKAGE))
    out["serves"], out["note"] = serves, note
    return out


class _Loaded(object):
    def __init__(self, ffi, lib, library_path, header_path, cdef):
        self.ffi = ffi
        self.lib = lib
        self.library_path = library_path
        self.header_path = header_path
        self.cdef = cdef
        self.cubin = None
        self.cubin_error = None


_lock = threading.Lock()
_loaded = None


def _read_header(library_path):
    tried = []
    for path in header_candidates(library_path):
        if path in tried:
            continue
        tried.append(path)
        if os.path.isfile(path):
            with open(path) as f:
                return path, f.read()
    raise LibraryNotFound(
        "kdtree_jit: kdtree.h (the source of the binding's declarations) "
        "was not found; looked at: %s.  Set KDTREE_HEADER to its path."
        % ", ".join(tried))


def load(library=None, header=None):
    """Loads libkdtree (once per process) and returns the loaded binding
    (``.ffi``, ``.lib``, ``.library_path``, ``.header_path``).  With
    explicit paths, loads those afresh (tests)."""
    global _loaded
    if _loaded is not None and library is None and header is None:
        return _loaded
    with _lock:
        if _loaded is not None and library is None and header is None:
            return _loaded
        try:
            import cffi
        except ImportError as e:
            raise ImportError("kdtree_jit needs cffi (pip install cffi): %s"
                              % e)
        ffi = cffi.FFI()
        lib = None
        errors = []
        for path in ([library] if library else library_candidates()):
            if os.sep in path and not os.path.exists(path):
                errors.append("%s (no such file)" % path)
                continue
            try:
                handle = ffi.dlopen(path)
            except OSError as e:
                errors.append("%s (%s)" % (path, str(e).splitlines()[0]))
                continue
            lib, library_path = handle, path
            break
        if lib is None:
            raise LibraryNotFound(
                "kdtree_jit: libkdtree could not be loaded; tried: %s.  "
                "`pip install` builds it into the package; for a build "
                "tree, set KDTREE_LIBRARY to its .libs/libkdtree.so."
                % "; ".join(errors))
        if header:
            with open(header) as f:
                header_path, text = header, f.read()
        else:
            header_path, text = _read_header(
                library_path if os.sep in library_path else None)
        cdef = extract_cdef(text)
        ffi.cdef(cdef)
        # Only now can functions be resolved: check the ABI before anything
        # else is called.
        try:
            abi = int(lib.kdtree_abi_version())
        except AttributeError:
            raise AbiMismatch("kdtree_jit: %s does not export "
                              "kdtree_abi_version(); it is not libkdtree"
                              % library_path)
        if abi != EXPECTED_ABI:
            raise AbiMismatch(
                "kdtree_jit: %s has ABI version %d but this kdtree_jit was "
                "written for ABI version %d; install matching versions of "
                "libkdtree and the Python package" % (library_path, abi,
                                                       EXPECTED_ABI))
        hdr_abi = header_abi_version(text)
        if hdr_abi is not None and hdr_abi != abi:
            raise AbiMismatch(
                "kdtree_jit: the header %s declares ABI version %d but the "
                "library %s has %d; point KDTREE_HEADER at the header the "
                "library was built from" % (header_path, hdr_abi,
                                             library_path, abi))
        _tell_site_packages(ffi, lib)
        loaded = _Loaded(ffi, lib, library_path, header_path, cdef)
        loaded.cubin, loaded.cubin_error = _add_cubin_layer(ffi, lib)
        if library is None and header is None:
            _loaded = loaded
        return loaded
