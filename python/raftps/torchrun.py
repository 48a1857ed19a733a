"""python3 -m raftps.torchrun: torchrun (torch.distributed.run) with the
``raftps`` rendezvous backend registered (:mod:`raftps.torch.rendezvous`).

    RAFTPS_CACERT=ca.pem RAFTPS_CERT=me.pem RAFTPS_KEY=me-key.pem \\
    python3 -m raftps.torchrun --nnodes 1:3 --nproc_per_node 2 --max_restarts 3 \\
        --rdzv_backend raftps --rdzv_endpoint 127.0.0.1:7000,127.0.0.1:7010,127.0.0.1:7020 \\
        --rdzv_id exp-1 train.py --epochs 3

Every torchrun option works as in torchrun; dashed spellings of its
options (``--rdzv-backend``, ``--nproc-per-node``, as newer torch takes)
are accepted before the training script. On Python 3.11 torch 1.13's
``--redirects``/``--tee`` default (0) breaks torchrun at start
(``Std.from_str`` returns None: 3.11 no longer iterates an IntFlag's zero
member); this wrapper fixes ``Std.from_str``.
"""

from __future__ import annotations

import re
import sys
from typing import Sequence


def fix_std_from_str() -> None:
    """Makes torch's ``Std.from_str`` map "0" to Std.NONE on Python 3.11
    (a no-op where it already does)."""
    from torch.distributed.elastic.multiprocessing import api

    std = api.Std
    if std.from_str("0") is std.NONE:
        return

    def from_str(vm: str):
        if re.match(api._VALUE_REGEX, vm):
            return std(int(vm))
        if re.match(api._MAPPING_REGEX, vm):
            return {int(i): std(int(v)) for i, v in (kv.split(":") for kv in vm.split(","))}
        raise ValueError(f"{vm} does not match: <{api._VALUE_REGEX}> or <{api._MAPPING_REGEX}>")

    std.from_str = staticmethod(from_str)


def underscore_options(argv: Sequence[str]) -> list[str]:
    """argv with torchrun's dashed option names (``--rdzv-endpoint``)
    spelled as torch 1.13 knows them (``--rdzv_endpoint``), up to the
    training script; the script's own arguments are left alone."""
    from torch.distributed.run import get_args_parser

    opts = get_args_parser()._option_string_actions
    out: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-") or a == "--":
            out.extend(argv[i:])  # the training script and its arguments
            break
        name, eq, value = a.partition("=")
        if name not in opts and name.startswith("--") and "--" + name[2:].replace("-", "_") in opts:
            name = "--" + name[2:].replace("-", "_")
        out.append(name + eq + value)
        action = opts.get(name)
        if not eq and action is not None and action.nargs != 0 and i + 1 < len(argv):
            out.append(argv[i + 1])  # the option's value
            i += 1
        i += 1
    return out


def main(argv: Sequence[str] | None = None) -> None:
    from torch.distributed import run

    from raftps.torch import rendezvous

    fix_std_from_str()
    rendezvous.register()
    run.main(underscore_options(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
