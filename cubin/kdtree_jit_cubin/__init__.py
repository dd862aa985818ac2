"""kdtree_jit_cubin: compiled kernels for kdtree-jit, ready to load.

The package is a read-only cache layer (kdtree-jit's docs/cache.md):
entries of the shapes that Kimi-K2-class deployments run, for sm_90a and
sm_120, compiled by ``kdtree-cache populate`` (cubin/build.py).  When
kdtree_jit loads libkdtree it imports this package and adds LAYER to the
layers the library searches, before the user's cache: nothing to
configure.  ``kdtree_jit.info()["cubin"]`` says what it found.

    LAYER          the layer's directory (its entries in LAYER/v1/)
    build()        what built it (layer.json): "version", "kdtree_jit"
                   (the library version its keys name), "nvrtc" (NVRTC's
                   version and build), "nvrtc_wheel" (the pip requirement
                   of that NVRTC, or None)
    scan(path)     the entries and aliases a layer holds, and the NVRTC
                   builds its aliases name
    shapes(path)   "kernel shape target" of each compiled entry
"""

import json
import os
import struct

_HERE = os.path.dirname(os.path.abspath(__file__))
LAYER = os.path.join(_HERE, "layer")

# The entry file's fixed header (docs/cache.md, "An entry file"): magic,
# format, header size, key, payload kind, reserved, preimage length,
# payload length, two checksums; little-endian.
_HEADER = struct.Struct("<8sII16sIIQQQQ")
_MAGIC = b"KDTCACHE"
_FORMAT = 1
_ALIAS = 3


def build():
    """What built the layer, from layer.json (written by cubin/build.py)."""
    with open(os.path.join(_HERE, "layer.json")) as f:
        return json.load(f)


def _entries(path):
    """(file, header fields) of each well-formed entry header of the
    layer at `path`.  The library verifies an entry whole when it loads
    it; this is the inventory."""
    d = os.path.join(path, "v%d" % _FORMAT)
    try:
        names = sorted(os.listdir(d))
    except OSError:
        return
    for name in names:
        if len(name) != 36 or not name.endswith(".kdt"):
            continue
        full = os.path.join(d, name)
        with open(full, "rb") as f:
            head = f.read(_HEADER.size)
        if len(head) < _HEADER.size:
            continue
        fields = _HEADER.unpack(head)
        if fields[0] == _MAGIC and fields[1] == _FORMAT:
            yield full, fields


def scan(path=LAYER):
    """{"entries": compiled entries, "aliases": alias entries, "nvrtc":
    sorted NVRTC builds the aliases name} of the layer at `path`."""
    entries = aliases = 0
    nvrtc = set()
    for full, fields in _entries(path):
        kind, pre_len, pay_len = fields[4], fields[6], fields[7]
        if kind != _ALIAS:
            entries += 1
            continue
        aliases += 1
        with open(full, "rb") as f:
            f.seek(_HEADER.size + pre_len)
            nvrtc.add(f.read(pay_len).decode("utf-8", "replace"))
    return {"entries": entries, "aliases": aliases, "nvrtc": sorted(nvrtc)}


def _records(text):
    """The preimage's records ("<label> <length>\\n<bytes>\\n") as a dict."""
    out, pos = {}, 0
    while pos < len(text):
        nl = text.index(b"\n", pos)
        label, length = text[pos:nl].rsplit(b" ", 1)
        start = nl + 1
        out[label.decode()] = text[start:start + int(length)]
        pos = start + int(length) + 1
    return out


def shapes(path=LAYER):
    """"kernel shape target" of each compiled (not alias) entry of the
    layer at `path`, sorted."""
    out = []
    for full, fields in _entries(path):
        if fields[4] == _ALIAS:
            continue
        with open(full, "rb") as f:
            f.seek(_HEADER.size)
            rec = _records(f.read(fields[6]))
        out.append("%s %s %s" % (rec["kernel"].decode(),
                                 rec["constants"].decode(),
                                 rec["target"].decode()))
    return sorted(out)
