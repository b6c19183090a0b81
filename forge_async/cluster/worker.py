"""`python -m forge_async.cluster.worker ADDRESS`: this node's Monarch worker (started by the launcher).

The controller on node 0 attaches to it and spawns procs here; they inherit this
process's environment (FORGE_ASYNC_NODE_RANK and _ADDR say which node they are on).
"""

import sys

import forge_async  # noqa: F401  (process-wide settings, before monarch is imported)
from monarch.actor import run_worker_loop_forever

if __name__ == "__main__":
    run_worker_loop_forever(address=sys.argv[1], ca="trust_all_connections")
