"""_build_backend: setuptools' PEP 517 backend run on a copy of the source
tree, so that ``pip install ./python`` leaves no build/ or raftps.egg-info
in it (setuptools writes both into the directory it builds in).

pyproject.toml names it (``build-backend``, ``backend-path = ["."]``);
every hook but the wheel, metadata and sdist ones is setuptools' own.
"""

import contextlib
import os
import shutil
import tempfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 (the hooks not wrapped below)

_HERE = os.path.dirname(os.path.abspath(__file__))
_SKIP = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "tests")


@contextlib.contextmanager
def _in_copy():
    """Runs the block in a temporary copy of this directory."""
    with tempfile.TemporaryDirectory(prefix="raftps-build-") as d:
        src = os.path.join(d, "src")
        shutil.copytree(_HERE, src, ignore=_SKIP)
        cwd = os.getcwd()
        os.chdir(src)
        try:
            yield
        finally:
            os.chdir(cwd)


def _abs(path):
    return None if path is None else os.path.abspath(path)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    out = _abs(metadata_directory)
    with _in_copy():
        return _setuptools.prepare_metadata_for_build_wheel(out, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    out, meta = _abs(wheel_directory), _abs(metadata_directory)
    with _in_copy():
        return _setuptools.build_wheel(out, config_settings, meta)


def build_sdist(sdist_directory, config_settings=None):
    out = _abs(sdist_directory)
    with _in_copy():
        return _setuptools.build_sdist(out, config_settings)
