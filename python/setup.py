"""The package's build: `pip install ./python` builds libf8.so with the
repository's Makefile and puts it inside the package (f8/libf8.so), where
f8/_lib.py looks first (after F8_LIBRARY).

The library is built by `make` in the repository root (this file's parent
directory), into build/python so the repository's own build/ is left alone,
with CUDA where the Makefile's probe finds it (nvcc on PATH and a GPU
visible) unless F8_MAKE_ARGS says otherwise (e.g. F8_MAKE_ARGS="CUDA=0", or
"CUDA=1 SM=90" to build the GPU code on a machine without a GPU). The wheel
is platform-specific: it carries a shared library.
"""
import os
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class BuildWithLibrary(build_py):
    """build_py, then libf8.so made and copied into the built package."""

    def run(self):
        super().run()
        if not os.path.exists(os.path.join(REPO, "Makefile")):
            raise RuntimeError("f8: no Makefile in %s: build the package from the f8 repository (pip install ./python)"
                               % REPO)
        build = os.path.join(REPO, "build", "python")
        jobs = os.environ.get("F8_MAKE_JOBS") or str(min(os.cpu_count() or 1, 8))
        cmd = ["make", "-C", REPO, "-j" + jobs, "BUILD=" + build] + shlex.split(os.environ.get("F8_MAKE_ARGS", ""))
        cmd.append(os.path.join(build, "libf8.so"))
        print("f8: building the library: " + " ".join(cmd))
        subprocess.check_call(cmd)
        dest = os.path.join(self.build_lib, "f8")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(os.path.join(build, "libf8.so"), os.path.join(dest, "libf8.so"))


class BinaryDistribution(Distribution):
    """A wheel with a shared library is not pure Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
