"""Packages the layer that cubin/build.py populated beside this file (in
its staging directory): the version and the requirements come from the
layer.json it wrote, so the wheel pins the kdtree-jit whose keys the
entries carry, and its [nvrtc] extra the NVRTC wheel that compiled them.
Everything else is in pyproject.toml."""
import json
import os

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "kdtree_jit_cubin", "layer.json")

if not os.path.isfile(MANIFEST):
    raise SystemExit("kdtree-jit-cubin: no layer here; build the wheel with "
                     "cubin/build.py, which compiles it first")
with open(MANIFEST) as f:
    built = json.load(f)
extras = {"nvrtc": [built["nvrtc_wheel"]]} if built["nvrtc_wheel"] else {}
setup(version=built["version"],
      install_requires=["kdtree-jit==%s" % built["kdtree_jit"]],
      extras_require=extras)
