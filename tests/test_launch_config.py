"""Where a node finds its place: flags, torchrun's and Slurm's environment; placement checks;
the GPUs each role's procs see, what they do before their imports and how they import."""

import asyncio
import os
import re
import subprocess
import sys
import time
from functools import partial

import pytest

from forge_async.mesh import roles
from forge_async.generation.platform import prepare_process
from forge_async.controller.config import GRPOConfig
from forge_async.errors import ConfigError
from forge_async.cluster.nodes import NodeSpec, first_host
from forge_async.mesh.config import PlacementConfig
from forge_async.mesh.procs import RunProcs, import_at_niceness, sleep_between_copies, spawn_procs, use_gpus
from forge_async.cluster.torchrun import leave_torchrun_job
from forge_async.cli.subprocess_run import REPO
from tests.nice_probe import ThreadNiceness, write_niceness

pytestmark = pytest.mark.unit


def resolve(environ: dict, **flags) -> NodeSpec:
    args = {"nnodes": None, "node_rank": None, "master_addr": None, "master_port": None, "join_timeout_s": None}
    return NodeSpec.resolve(**{**args, **flags}, environ=environ)


def test_flags_win_over_torchrun_environment_which_wins_over_slurm():
    slurm = {"SLURM_NNODES": "4", "SLURM_NODEID": "3", "SLURM_JOB_NODELIST": "gpu[007-010]"}
    assert resolve(slurm) == NodeSpec(4, 3, "gpu007", 29500)
    torchrun = {**slurm, "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"}
    assert resolve(torchrun) == NodeSpec(2, 1, "10.0.0.1", 1234)
    assert resolve(torchrun, node_rank=0, master_port=999) == NodeSpec(2, 0, "10.0.0.1", 999)
    assert resolve({}) == NodeSpec(1, 0, "127.0.0.1", 29500)
    assert resolve({"FORGE_ASYNC_JOIN_TIMEOUT": "7"}).join_timeout_s == 7.0


@pytest.mark.parametrize(
    "nodelist, first",
    [("node01", "node01"), ("gpu[003-005,9],cpu1", "gpu003"), ("a[1,4]", "a1"), ("h1,h2", "h1")],
)
def test_first_host_of_a_slurm_node_list(nodelist, first):
    assert first_host(nodelist) == first


@pytest.mark.parametrize(
    "flags, environ, named",
    [
        ({"node_rank": 2, "nnodes": 2}, {}, "--node-rank=2"),
        ({}, {"NNODES": "two"}, "NNODES"),
        ({"master_port": 70000}, {}, "--master-port"),
    ],
)
def test_bad_node_specs_name_the_culprit(flags, environ, named):
    with pytest.raises(ConfigError, match=named):
        resolve(environ, **flags)


@pytest.mark.parametrize(
    "placement, named",
    [
        (PlacementConfig(trainer_hosts=[0, 2]), "consecutive"),
        (PlacementConfig(generator_hosts=[]), "empty"),
        (PlacementConfig(generator_hosts=[1, 1]), "twice"),
        (PlacementConfig(trainer_hosts=[3]), "node rank 3"),
    ],
)
def test_impossible_placements_fail_naming_the_key(placement, named):
    with pytest.raises(ConfigError, match=named):
        placement.check(nnodes=3)


def test_generators_spread_round_robin():
    placement = PlacementConfig(generator_hosts=[1, 2])
    placement.check(nnodes=3)
    assert [placement.generator_host(i) for i in range(5)] == [1, 2, 1, 2, 1]


def test_each_role_sees_its_own_gpus():
    placement = PlacementConfig(trainer_gpus=[0, 1], generator_gpus=[2, 3])
    placement.check_gpus(trainer_procs=2, generator_count=2)
    assert placement.visible_gpus(roles.TRAINER) == "0,1"  # rank LOCAL_RANK takes the LOCAL_RANK-th
    assert [placement.visible_gpus(roles.generator(i)) for i in range(2)] == ["2", "3"]
    assert placement.visible_gpus(roles.REPLAY_BUFFER) is None and placement.visible_gpus(roles.weight_relay(1)) is None
    assert (
        PlacementConfig().visible_gpus(roles.TRAINER) is None
        and PlacementConfig().visible_gpus(roles.generator(0)) is None
    )


def test_generators_take_their_nodes_gpus_in_the_order_they_land_there():
    placement = PlacementConfig(trainer_hosts=[0], generator_hosts=[1, 2], generator_gpus=[4, 5])
    placement.check_gpus(trainer_procs=1, generator_count=4)  # no node runs both: no overlap to check
    # generator0 -> node 1, generator1 -> node 2, generator2 -> node 1, generator3 -> node 2
    assert [placement.visible_gpus(roles.generator(i)) for i in range(4)] == ["4", "4", "5", "5"]


def test_shared_gpus_are_handed_out_round_robin():
    placement = PlacementConfig(trainer_gpus=[0], generator_gpus=[0, 1], share_gpus=True)
    placement.check_gpus(trainer_procs=1, generator_count=3)
    assert [placement.visible_gpus(roles.generator(i)) for i in range(3)] == ["0", "1", "0"]


def node_with_gpus(monkeypatch, count: int, node_env: str | None) -> None:
    """This process as a proc on a node with `count` GPUs whose environment sets
    CUDA_VISIBLE_DEVICES to `node_env` (None: not set). Restored after the test."""
    if node_env is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", node_env)

    def device_count() -> int:  # as CUDA counts: the listed GPUs up to the first that does not exist
        listed = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
        return next((n for n, gpu in enumerate(listed) if not (gpu.isdigit() and int(gpu) < count)), len(listed))

    monkeypatch.setattr("torch.cuda.device_count", device_count)


def test_gpu_indices_count_among_the_gpus_the_node_shows(monkeypatch):
    node_with_gpus(monkeypatch, 8, node_env=None)
    use_gpus("0,3", "placement.trainer_gpus")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,3"
    node_with_gpus(monkeypatch, 8, node_env="4,5,6,7")  # as Slurm sets it for a job
    use_gpus("0,2", "placement.trainer_gpus")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,6"


@pytest.mark.parametrize(
    "count, node_env, error",
    [(2, None, "GPU(s) 0,3 not all found"), (8, "4,5", "GPU(s) 0,3 of CUDA_VISIBLE_DEVICES=4,5 not all found")],
)
def test_a_node_without_the_gpus_named_fails_in_the_procs_bootstrap(monkeypatch, count, node_env, error):
    node_with_gpus(monkeypatch, count, node_env)
    with pytest.raises(ConfigError, match=f"^placement.generator_gpus: {re.escape(error)}"):
        use_gpus("0,3", "placement.generator_gpus")


def test_procs_prepare_as_their_role_needs_vllm_gpus_and_openmp_at_rest():
    config = GRPOConfig(placement=PlacementConfig(trainer_gpus=[0], generator_gpus=[1]))
    procs = RunProcs(config.plan(), hosts=None, log_dir=None)
    nice, trainer_gpus = procs.prepare(roles.TRAINER)  # nothing about vLLM, TORCHDYNAMO_DISABLE included
    assert (nice.func, nice.args) == (import_at_niceness, (5,))  # first: use_gpus imports torch
    assert (trainer_gpus.func, trainer_gpus.args) == (use_gpus, ("0", "placement.trainer_gpus"))
    gpus, engine = procs.prepare(roles.generator(0))
    assert (gpus.func, gpus.args) == (use_gpus, ("1", "placement.generator_gpus"))
    assert (engine.func, engine.args) == (prepare_process, (config.generator,))
    assert [step.func for step in procs.prepare(roles.REPLAY_BUFFER)] == [import_at_niceness]
    assert [step.func for step in RunProcs(GRPOConfig().plan(), None, None).prepare(roles.generator(1))] == [
        prepare_process
    ]
    assert (
        RunProcs(GRPOConfig(placement=PlacementConfig(import_nice=0)).plan(), None, None).prepare(roles.TRAINER) == ()
    )
    # the weight sender and relays only copy now and then: their OpenMP threads must not spin
    for role in (roles.WEIGHT_SENDER, roles.weight_relay(1)):
        assert [getattr(step, "func", step) for step in procs.prepare(role)] == [
            import_at_niceness,
            sleep_between_copies,
        ]


@pytest.mark.procs
def test_a_procs_imports_yield_the_cores_and_its_actor_keeps_its_priority(tmp_path):
    """placement.import_nice lowers the priority of a proc's bootstrap (its imports) only."""
    bootstrap_nice = tmp_path / "bootstrap_nice"
    steps = (
        *RunProcs(GRPOConfig().plan(), None, None).prepare(roles.TRAINER),
        partial(write_niceness, str(bootstrap_nice)),
    )

    async def actor_niceness() -> int:
        procs = spawn_procs(None, 1, "nice_probe", None, prepare=steps)
        try:
            return await procs.spawn("nice_probe", ThreadNiceness).niceness.call_one()
        finally:
            await procs.stop()

    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert asyncio.run(actor_niceness()) == ours
    assert int(bootstrap_nice.read_text()) == min(19, ours + GRPOConfig().placement.import_nice)


@pytest.mark.procs
def test_bootstrap_imports_run_without_the_collector_and_freeze_what_they_made():
    """A proc's bootstrap imports leave the collector on, with everything they made frozen (no
    later pass walks it); a failing import leaves the collector on too."""
    script = (
        "import gc, sys; from forge_async.process.imports import import_frozen\n"
        "seen = []; gc.callbacks.append(lambda phase, info: seen.append(phase))\n"
        "before = gc.get_freeze_count(); import_frozen('email.mime.text', 'json')\n"
        "assert 'email.mime.text' in sys.modules and gc.isenabled(), 'imported, collector back on'\n"
        "assert not seen, f'no collection during the imports: {seen}'\n"
        "assert gc.get_freeze_count() > before + 1000, gc.get_freeze_count()\n"
        "try: import_frozen('no_such_module_here')\n"
        "except ModuleNotFoundError: assert gc.isenabled()\n"
        "else: raise AssertionError('the missing module was imported')\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


@pytest.mark.procs
def test_the_controller_imports_no_torchtitan_torchstore_or_dcp_and_the_procs_preload_them():
    """The controller imports every actor class to spawn it; what only the procs run (TorchTitan,
    torch.distributed.checkpoint, torchstore: ~2 s of CPU) stays out of it, loaded by the procs'
    bootstraps instead (PRELOAD), so no proc imports them mid-run; and the trainer proc that
    writes the tiny model's weights imports no transformers for it."""
    heavy = ("torchtitan", "torch.distributed.checkpoint", "torchstore")
    script = (
        "import sys; import forge_async.controller.grpo_run, forge_async.controller.sft_run, apps.distill.main\n"
        f"loaded = sorted({{m for m in sys.modules if m.startswith({heavy!r})}})\n"
        "assert not loaded, loaded\n"
        "from forge_async.mesh.procs import PRELOAD\n"
        "assert 'forge_async.models.titan' in PRELOAD['scorer'] and 'forge_async.weights.store' in PRELOAD['weight_relay']\n"
    )
    trainer_proc = (  # its bootstrap, then what it runs for the tiny model
        "import sys; from forge_async.mesh.procs import PRELOAD; from forge_async.process.imports import import_frozen\n"
        "import_frozen(*PRELOAD['trainer']); assert 'torch.distributed.checkpoint' in sys.modules\n"
        "from forge_async.models.tiny import write_tiny_weights\n"
        "assert 'transformers' not in sys.modules, 'the tiny weights need no transformers'\n"
    )
    for code in (script, trainer_proc):
        subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.procs
def test_start_up_lines_count_from_the_process_launch_to_the_hundredth_of_a_second():
    """`[ t.ts]` prefixes are seconds since the process started; psutil's create_time alone is up
    to 1 s early (Linux gives the boot time in whole seconds)."""
    script = "import time; from forge_async.observability.console import _LAUNCHED_AT; print(_LAUNCHED_AT, time.time())"
    before = time.time()
    launched, printed = map(
        float, subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    )
    assert before - 0.05 <= launched <= printed, (launched - before, printed - before)
    assert launched - before < 0.5  # the child's start, not its imports


def test_a_one_process_torchrun_job_is_forgotten_and_a_larger_one_refused():
    own = {"PATH": "/usr/bin", "MASTER_PORT": "1"}
    assert leave_torchrun_job(dict(own)) is False  # not started by torchrun: nothing touched
    one = {**own, "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_USE_AGENT_STORE": "True", "WORLD_SIZE": "1", "RANK": "0"}
    assert leave_torchrun_job(one) is True and one == {"PATH": "/usr/bin"}
    with pytest.raises(ConfigError, match=r"one of 2 processes \(WORLD_SIZE=2\).*forge_async.cluster"):
        leave_torchrun_job({**one, "TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "2"})


@pytest.mark.e2e
def test_torchrun_with_one_process_runs_the_app(tmp_path):
    """torchrun's environment once reached the trainer, which then waited for a store nobody served."""
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=1",
        "-m",
        "apps.grpo",
        f"hydra.run.dir={run_dir}",
        "steps=2",
        "eval.every_steps=0",
        "checkpoint.every_steps=0",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "started by torchrun: running as its one process" in done.stdout
    assert "== async GRPO: 2 steps" in done.stdout


@pytest.mark.procs
def test_the_launchers_help_is_whole_and_a_missing_app_is_a_usage_error():
    launcher = [sys.executable, "-m", "forge_async.cluster"]
    helped = subprocess.run([*launcher, "--help"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert helped.returncode == 0, helped.stderr
    assert "--node-rank" in helped.stdout and "srun python -m forge_async.cluster" in helped.stdout
    missing = subprocess.run([*launcher, "--nnodes", "1"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert missing.returncode == 2 and "name the app module after --" in missing.stderr


@pytest.mark.procs
def test_the_config_modules_import_neither_torch_vllm_nor_monarch():
    """A run spawns its procs as soon as its config is checked, and they import vLLM and TorchTitan
    while the controller imports torch (cli/app.py, the start-up order): every config module, the
    root configs included, must come in without torch, vLLM or Monarch, or the start-up overlap is lost."""
    modules = [
        ".".join(path.relative_to(REPO).with_suffix("").parts)
        for pattern in ("forge_async/*/config.py", "apps/*/config.py")
        for path in sorted(REPO.glob(pattern))
    ]
    assert "forge_async.controller.config" in modules and len(modules) > 10, modules
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'vllm', 'monarch', 'torchtitan'})\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO)
