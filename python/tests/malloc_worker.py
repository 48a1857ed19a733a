"""Push+pull rounds of a large job through raftps.ps.ParamClient (run by
test_malloc.py): argv = endpoints job rounds. Prints whether the malloc
settings are in effect and the minor page faults per round after a warm-up
round (the cluster's TLS material comes from the RAFTPS_* variables)."""

import resource
import sys

import numpy as np

import raftps
from raftps import _malloc
from raftps.ps import ParamClient


def main():
    endpoints, job, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with raftps.Client(endpoints.split(","), timeout=20.0) as c, ParamClient(c, job, "malloc-probe") as ps:
        dst = ps.pull()
        grads = {k: np.zeros_like(v) for k, v in dst.items()}
        ps.push(grads)
        ps.pull(dst)
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(rounds):
            ps.push(grads)
            ps.pull(dst)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        print(int(bool(_malloc._applied)), faults // rounds, flush=True)


if __name__ == "__main__":
    main()
