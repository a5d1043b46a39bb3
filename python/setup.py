"""Build of the estream Python package (metadata: pyproject.toml).

The package is pure Python (ctypes) plus one file it bundles: the shared library
libestream.so.2, built by the estream source tree's own Makefile. Where the tree is:

- ESTREAM_SOURCE_DIR, when set (a build in an isolated copy of python/);
- else the folder above this one, when it holds the Makefile and include/estream.h (pip 21.3
  and newer build a local folder in place, so ``pip install ./python`` from the tree finds it).

The build runs ``make -C TREE BUILD_DIR/libestream.so`` (BUILD_DIR: ESTREAM_BUILD_DIR, default
build) and copies libestream.so.2 into the package (estream/_lib/). Without a tree, or with
ESTREAM_NO_BUNDLE=1, nothing is built or bundled and the package loads the system's library (or
ESTREAM_LIBRARY's) at run time. The version is the library's (include/estream.h), 0.1.0
without a tree.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
SONAME = "libestream.so.2"


def source_tree() -> Path | None:
    """The estream source tree to build the library from, or None."""
    env = os.environ.get("ESTREAM_SOURCE_DIR")
    if env:
        root = Path(env).resolve()
        if not (root / "Makefile").is_file():
            sys.exit(f"estream: ESTREAM_SOURCE_DIR={env} has no Makefile")
        return root
    root = HERE.parent
    if (root / "Makefile").is_file() and (root / "include" / "estream.h").is_file():
        return root
    return None


def library_version(root: Path | None) -> str:
    """MAJOR.MINOR.PATCH from estream.h's ES_VERSION_* (0.1.0 without a tree)."""
    if root is None:
        return "0.1.0"
    text = (root / "include" / "estream.h").read_text()
    parts = [re.search(rf"^#define ES_VERSION_{k} (\d+)$", text, re.M) for k in
             ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        return "0.1.0"
    return ".".join(p.group(1) for p in parts)  # type: ignore[union-attr]


def build_library(root: Path) -> Path:
    """Runs the tree's make for the shared library; returns the path of libestream.so.2."""
    build = os.environ.get("ESTREAM_BUILD_DIR", "build")
    target = f"{build}/libestream.so"
    jobs = str(os.cpu_count() or 1)
    cmd = ["make", "-C", str(root), f"-j{jobs}", f"BUILD={build}", target]
    print("estream: " + " ".join(cmd), file=sys.stderr)
    try:
        subprocess.run(cmd, check=True, stdout=sys.stderr)
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"estream: building the library failed ({e}); the C toolchain and the "
                 "library's dependencies are in tools/install-deps.sh of the source tree")
    lib = (root / build / SONAME) if not os.path.isabs(build) else Path(build) / SONAME
    if not lib.exists():
        sys.exit(f"estream: make did not produce {lib}")
    return lib


class BuildPy(build_py):
    """build_py that also builds libestream and bundles it as estream/_lib/libestream.so.2."""

    def run(self) -> None:
        super().run()
        root = source_tree()
        if root is None or os.environ.get("ESTREAM_NO_BUNDLE") == "1":
            print("estream: no estream source tree (or ESTREAM_NO_BUNDLE=1): the library is "
                  "not bundled; the package will load the system's libestream.so.2 or "
                  "$ESTREAM_LIBRARY", file=sys.stderr)
            return
        lib = build_library(root)
        # an editable install imports the sources: the library goes beside them
        base = HERE if getattr(self, "editable_mode", False) else Path(self.build_lib)
        dest = base / "estream" / "_lib"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib.resolve(), dest / SONAME)  # the file, not the symlink
        os.chmod(dest / SONAME, 0o755)


class BinaryDistribution(Distribution):
    """A wheel with a shared library in it is platform-specific, not py3-none-any."""

    def has_ext_modules(self) -> bool:
        return source_tree() is not None and os.environ.get("ESTREAM_NO_BUNDLE") != "1"


setup(
    version=library_version(source_tree()),
    cmdclass={"build_py": BuildPy},
    distclass=BinaryDistribution,
)
