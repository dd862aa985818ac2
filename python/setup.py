"""Only here to copy the C header into the package when it is built:
kdtree_jit reads its cffi declarations from kdtree.h (one source of truth),
and an installed package must carry the header it was built with.
Everything else is in pyproject.toml."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPy(build_py):
    def run(self):
        build_py.run(self)
        src = os.environ.get("KDTREE_HEADER") or os.path.join(
            HERE, "..", "include", "kdtree.h")
        dst = os.path.join(self.build_lib, "kdtree_jit", "kdtree.h")
        if os.path.exists(src):
            self.mkpath(os.path.dirname(dst))
            shutil.copyfile(src, dst)
        elif not os.path.exists(os.path.join(HERE, "kdtree_jit", "kdtree.h")):
            # An installed libkdtree's include directory still serves.
            self.warn("kdtree.h not found at %s: the package will look for "
                      "it beside the installed library" % src)


setup(cmdclass={"build_py": BuildPy})
