"""`pip install ./python` works offline with Debian's pip and setuptools,
and the installed copy (not the source tree) talks to a cluster."""

import os
import shutil
import subprocess
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)


def test_pip_install_offline(cluster, tmp_path):
    # Build from a copy: an in-tree build would leave build/ and
    # *.egg-info in python/.
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(PYDIR, f), src / f)
    shutil.copytree(os.path.join(PYDIR, "raftps"), src / "raftps",
                    ignore=shutil.ignore_patterns("__pycache__"))
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
