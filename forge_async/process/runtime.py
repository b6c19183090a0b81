"""Process-wide settings every forge_async process needs, applied on import.

Monarch procs inherit the environment of the process that spawns them, so
setting these once in the controller process covers every actor. Settings only one
role needs are set in its own proc (e.g. TORCHDYNAMO_DISABLE for a CPU generator:
generation/platform.py), never here: the trainer may torch.compile.
"""

import os

_DEFAULTS = {
    # vLLM's engine runs inside the generator's proc: multiprocess engines cannot
    # start inside Monarch's daemonic procs.
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "TOKENIZERS_PARALLELISM": "false",
    # OpenMP threads sleep when they run out of work instead of spinning for it. The generator,
    # the trainer and the controller share the host's cores; a spinning worker of vLLM's CPU
    # kernels takes CPU from the trainer between each of its many small parallel regions
    # (benchmarks/pipeline/pipeline.py: the cores each proc uses). Read when libgomp loads.
    "OMP_WAIT_POLICY": "PASSIVE",
    "VLLM_LOGGING_LEVEL": "WARNING",
    # How often Monarch looks for dead procs (its default, 10s, is how long a crash goes
    # unnoticed). Read when monarch is imported: forge_async must be imported first.
    "HYPERACTOR_MESH_SUPERVISION_POLL_FREQUENCY": "1s",
    # How long a proc on another node may go without reporting before Monarch declares it
    # stopped (its default, 1m, is how long a dead node goes unnoticed).
    "HYPERACTOR_MESH_GET_PROC_STATE_MAX_IDLE": "15s",
    # Monarch 0.6 casts a call to a mesh through its tree of comm actors by default, and the
    # callee's proc keeps native memory for every call so delivered, for good (a run's procs
    # grew without bound: benchmarks/pipeline/soak.py). Sent point to point to each actor (up
    # to this many actors: every mesh of this project), a call leaves a fraction of that.
    "HYPERACTOR_MESH_V1_CAST_POINT_TO_POINT_THRESHOLD": "1024",
    # torchstore sets this on import (large tensors in one message) and prints that it did.
    "HYPERACTOR_CODEC_MAX_FRAME_LENGTH": str(2**40),
}


_applied: set[str] = set()  # the keys apply_defaults set (the user had not)


def apply_defaults() -> None:
    for key, value in _DEFAULTS.items():
        if key not in os.environ:
            os.environ[key] = value
            _applied.add(key)


def environment_without_defaults() -> dict[str, str]:
    """This process's environment less what apply_defaults added: the environment another
    program (e.g. a baseline in benchmarks/) would have had, launched from the user's shell."""
    return {key: value for key, value in os.environ.items() if key not in _applied}
