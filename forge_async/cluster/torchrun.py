"""An app started by torchrun: run as the one process of a one-process job, or stop and say how.

forge_async spawns its own processes (Monarch procs), so a torchrun job can only be a
launcher of one process: `torchrun --standalone --nproc-per-node=1 -m apps.grpo`. torchrun's
environment must not reach the procs: with TORCHELASTIC_USE_AGENT_STORE set, the trainer's
rank 0 would wait for torchrun's agent to serve the rendezvous store that Monarch gives it,
which nobody serves (the run hung). A job of several processes stops at once with the
commands that launch one host or several.
"""

import os
from collections.abc import MutableMapping

from forge_async.errors import ConfigError
from forge_async.process.interpreter import python

_MARK = "TORCHELASTIC_RUN_ID"  # set by torchrun's agent for every process it starts
_JOB_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_NAME",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def leave_torchrun_job(environ: MutableMapping[str, str] = os.environ) -> bool:
    """If torchrun started this process: forget its job (True), or raise if the job has
    several processes. False if torchrun did not start it."""
    if _MARK not in environ:
        return False
    world_size = environ.get("WORLD_SIZE", "1")
    if world_size != "1":
        raise ConfigError(
            f"started by torchrun as one of {world_size} processes (WORLD_SIZE={world_size}); forge_async "
            f"spawns its own processes: on one host run `{python()} -m apps.grpo ...` (or torchrun with "
            f"--standalone --nproc-per-node=1), across hosts run `{python()} -m forge_async.cluster --nnodes N "
            "--node-rank R --master-addr ADDR -- apps.grpo ...` on each (docs/launch.md)"
        )
    for name in [n for n in environ if n.startswith("TORCHELASTIC_") or n in _JOB_VARIABLES]:
        del environ[name]
    return True
