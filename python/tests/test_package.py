"""`pip install ./python` works offline with Debian's pip and setuptools,
and the installed copy (not the source tree) talks to a cluster."""

import os
import shutil
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)


def copy_tree(dst):
    """A copy of python/ as a user would have it (no caches)."""
    shutil.copytree(PYDIR, dst, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return dst


def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_pip_install_offline(cluster, tmp_path):
    src = copy_tree(tmp_path / "src")
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps",
                        "--disable-pip-version-check", "--target", str(target), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (target / "raftps" / "v1" / "kv_pb2.py").exists() and list(target.glob("raftps-*.dist-info"))
    # The installed package, from a directory without the sources; TLS from
    # the environment (RAFTPS_CACERT, RAFTPS_CERT, RAFTPS_KEY: the fixture's).
    key = "/pip-installed/" + uuid.uuid4().hex[:8]
    code = ("import sys, raftps, raftps.jobs, raftps.ps, raftps.torch\n"
            "c = raftps.Client(sys.argv[1])\n"
            "c.put(sys.argv[2], b'ok')\n"
            "print(raftps.__file__, c.get(sys.argv[2]).value.decode(), c.tls is not None)\n")
    env = dict(os.environ, PYTHONPATH=str(target))
    r = subprocess.run([sys.executable, "-c", code, ",".join(n.grpc for n in cluster), key],
                       capture_output=True, text=True, cwd=str(tmp_path), env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    path, value, secure = r.stdout.split()
    assert path == str(target / "raftps" / "__init__.py") and value == "ok" and secure == "True"


def test_pip_install_venv_leaves_tree_clean(tmp_path):
    # The guide's install: a venv on Debian's python that sees its packages
    # (grpcio, numpy, torch), then pip offline without build isolation
    # (which would fetch setuptools from an index).
    src = copy_tree(tmp_path / "python")
    before = files(src)
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation",
                        "--disable-pip-version-check", str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    after = files(src)
    assert after == before, f"pip install left files in the tree: {sorted(set(after) - set(before))}"
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import raftps, raftps.torch; print(raftps.__file__)"],
                       capture_output=True, text=True, cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith(str(venv)), r.stdout
