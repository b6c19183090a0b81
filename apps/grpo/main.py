"""GRPO on Monarch actor meshes: configure, build the meshes, run the loop, report.

    python -m apps.grpo                                  # CPU default: tiny model, max-digit task
    python -m apps.grpo mode=sync steps=50 trainer.procs=2 max_policy_age=0

Every key of configs/grpo.yaml can be overridden; see docs/configuration.md.
"""

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import forge_async  # noqa: F401  (process-wide runtime settings)
from forge_async.process import disk_full
from forge_async.checkpoint.resume import resume_dir_from_argv, resumed_config
from forge_async.controller.config import GRPOConfig
from forge_async.config.schema import check_override_shapes, open_mappings
from forge_async.observability.console import keep_console_for_own_lines, since_launch
from forge_async.errors import ConfigError, TrainerFailed, UserError
from forge_async.process.heap_trim import start_heap_trimmer
from forge_async.controller.interrupt import take_sigterm_as_ctrl_c
from forge_async.process.exit import exit_app
from forge_async.mesh.hosts import Hosts
from forge_async.process.imports import import_frozen
from forge_async.mesh.procs import RunProcs, keep_controller_alive_on_faults, shut_down_monarch
from forge_async.cluster.torchrun import leave_torchrun_job
from forge_async.observability.spans import TRACER
from forge_async.weights import scratch

ConfigStore.instance().store(name="grpo_schema", node=open_mappings(GRPOConfig))
# An absolute path: under `python -m`, Hydra would read a relative one as a module name.
CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "configs")



async def run(config: GRPOConfig, run_dir: Path) -> dict:
    """Spawn the run's procs first (they start importing vLLM and TorchTitan at once), then
    import the training half, which needs torch (its imports overlap theirs)."""
    async with spawned_procs(config, run_dir) as procs:
        import_frozen("apps.grpo.training")
        from apps.grpo.training import train

        return await train(config, run_dir, procs)


@asynccontextmanager
async def spawned_procs(config: GRPOConfig, run_dir: Path) -> AsyncIterator[RunProcs]:
    """The run's procs, spawned first thing (every app's start); those no actor took are
    stopped when the block ends."""
    print(f"run dir: {run_dir}", flush=True)
    config.check_paths()
    if leave_torchrun_job():
        print("started by torchrun: running as its one process; its job's variables stay out of the procs", flush=True)
    hosts = Hosts.from_env()
    config.placement.check(hosts.nnodes)
    config.weights = config.weights.resolved()
    keep_controller_alive_on_faults()
    start_heap_trimmer()
    TRACER.enabled = config.trace.enabled
    scratch_dir = claim_scratch(Path(config.weights.channel_dir))
    await hosts.start()
    procs = RunProcs(config, hosts, None if config.verbose else run_dir / "logs")
    procs.spawn_all()
    print(f"{since_launch()} spawning {spawned_meshes(config)} ...", flush=True)
    try:
        yield procs
    finally:
        await procs.stop_unused()
        scratch.remove(scratch_dir)
        scratch.reclaim(scratch_dir.parent)


def claim_scratch(directory: Path) -> Path:
    """This host's scratch directory of the run (weights/scratch.py), owned by this process,
    after removing those of runs on this host that died without removing theirs."""
    scratch.name_this_process_owner()
    for stale in scratch.reclaim(directory.parent):
        print(f"removed {stale}: its run ended without removing it", flush=True)
    return scratch.claim(directory)


def report(summary: dict, app: str = "apps.grpo", what: str = "GRPO") -> None:
    reached = summary["target_reached"]
    target = (
        f"reached {summary['target_reward']} at step {reached['step']} ({reached['wall_s']:.0f}s)"
        if reached
        else f"target {summary['target_reward']} not reached"
    )
    rewards = (
        f"reward {summary['reward_first']:.2f} -> {summary['reward_last']:.2f} ({target})"
        if summary["steps"]
        else "no step trained"
    )
    print(
        f"\n== {summary['mode']} {what}: {summary['steps']} steps in {summary['wall_s']:.0f}s ==\n"
        f"{rewards}\n"
        f"samples: generated {summary['generated']} = trained {summary['trained']}"
        f" + dropped stale {summary['dropped_stale']} + dropped other {summary['dropped_other']}"
        f" + left in buffer {summary['left_in_buffer']} + in flight {summary['in_flight']}"
        f" ({'adds up' if summary['accounting_ok'] else 'DOES NOT ADD UP'})\n"
        f"trainer idle {100 * summary['trainer_idle_frac']:.0f}%,"
        f" generator idle {100 * summary['generator_idle_frac']:.0f}%,"
        f" {summary['samples_per_s']:.0f} samples/s\n"
        f"run dir: {summary['run_dir']} (metrics.jsonl, plots.png, trace.json, summary.json, config.yaml, final_model/,"
        " checkpoints/, logs/)"
    )
    report_evaluations(summary)
    if summary["dropped_other"] or summary["not_started"]:
        print(f"dropped by reason: {summary['dropped_by_reason']}")
    if summary["not_started"]:
        print(
            f"not started (dropped before reaching a generator; not counted as generated): "
            f"{summary['not_started']} {summary['not_started_by_reason']}"
        )
    if summary["generator_restarts"]:
        print(
            f"generator restarts: {summary['generator_restarts']} "
            f"({summary['lost_requests']} lost requests issued again)"
        )
    report_early_end(summary, app)


def report_evaluations(summary: dict) -> None:
    """The first and the last evaluation on held-out prompts, if there were any."""
    if summary["eval_last"]:
        first, last = summary["eval_first"], summary["eval_last"]
        print(
            f"eval on {last['eval/prompts']} held-out prompts: reward {first['eval/reward_mean']:.2f} "
            f"(v{first['eval/version']}) -> {last['eval/reward_mean']:.2f} (v{last['eval/version']}), "
            f"pass@{last['eval/samples_per_prompt']} {first['eval/pass@k']:.2f} -> {last['eval/pass@k']:.2f}"
        )


def report_early_end(summary: dict, app: str) -> None:
    """What stopped a run before its last step, and the command that continues it."""
    if summary["failure"]:
        print(f"stopped early: {summary['failure']}")
    if summary["stop_reason"]:
        print(f"interrupted ({summary['stop_reason']}) after step {summary['steps']}")
    for what in summary["cut_short"]:
        print(f"cut short: {what}")
    if summary["failure"] or summary["stop_reason"]:
        print(f"resume with: python -m {app} resume={summary['run_dir']}")


def exit_status(summary: dict) -> int:
    """0 for a run that ran its steps; 1 for one a failure stopped; 128 + signal if interrupted."""
    if summary["failure"]:
        return 1
    if summary["stop_reason"]:
        return 128 + signal.Signals[summary["stop_reason"]]
    return 0


def load_config(cfg: DictConfig, schema: type = GRPOConfig) -> GRPOConfig:
    """The run's config: the composed one, or, with resume=RUN_DIR, the one saved there."""
    if cfg.resume:
        cfg = resumed_config(Path(cfg.resume), HydraConfig.get().overrides.task, cfg)
        cfg = OmegaConf.merge(OmegaConf.structured(schema), cfg)
    return OmegaConf.to_object(cfg)


def launch(
    prepare: Callable[[Path], Any],
    app: str,
    what: str,
    after: Callable[[dict], None] = lambda _: None,
    run: Callable[[Any, Path], Awaitable[dict]] = run,
    report: Callable[[dict, str, str], None] = report,
) -> None:
    """An app's life under Hydra: its config (`prepare(run_dir)`), the run, the report, the exit status.

    Bad input is one line and status 2; a trainer failure, status 1 with the resume command;
    `after(summary)` adds the app's own lines to the report. `run(config, run_dir)` and
    `report(summary, app, what)`: GRPO's unless the app brings its own (apps.sft)."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # Monarch starts with the run, its output sent to the logs: a run stopped before (bad input)
    # has nothing to shut down, and starting Monarch's runtime to stop it would put Monarch's
    # "internal logs are being written to /tmp/..." line on the console.
    monarch_started = False
    try:
        config = prepare(run_dir)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(config)))
        if not config.verbose:
            keep_console_for_own_lines(run_dir / "logs")
        monarch_started = True
        take_sigterm_as_ctrl_c()
        summary = asyncio.run(run(config, run_dir))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except TrainerFailed as err:
        print(f"error: {err}\nresume with: python -m {app} resume={run_dir}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # Ctrl-C before training started: nothing to save yet
        print("interrupted during start-up", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    except OSError as err:  # a full disk before the run's own writers could note it
        if not disk_full.is_disk_full(err):
            raise
        print(f"error: {disk_full.describe(err.filename or run_dir)}", file=sys.stderr)
        sys.exit(1)
    finally:
        if monarch_started:
            shut_down_monarch()
    summary["failure"] = summary["failure"] or disk_full.first()  # plots.png is drawn after the summary
    report(summary, app, what)
    after(summary)
    sys.exit(exit_status(summary))


@hydra.main(version_base=None, config_path=CONFIG_DIR, config_name="grpo")
def hydra_main(cfg: DictConfig) -> None:
    launch(lambda run_dir: load_config(cfg), "apps.grpo", "GRPO")


def start(hydra_entry: Callable[[], None], schema: type = GRPOConfig) -> None:
    """`resume=RUN_DIR` continues in that directory: Hydra is pointed at it before it starts.
    An override of the wrong shape for `schema`'s key is one line before Hydra composes."""
    try:
        check_override_shapes(schema, sys.argv[1:])
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    resume = resume_dir_from_argv(sys.argv[1:])
    if resume is not None:
        if not Path(resume).is_dir():
            print(f"error: resume={resume}: no such run directory", file=sys.stderr)
            sys.exit(2)
        sys.argv += [f"hydra.run.dir={resume}", "hydra.output_subdir=null"]
    try:
        hydra_entry()
    except SystemExit as done:
        exit_app(done.code)


def main() -> None:
    start(hydra_main)


def spawned_meshes(config: GRPOConfig) -> str:
    """The meshes spawn_all starts, as the start-up line names them."""
    meshes = [f"trainer x{config.trainer.procs}", f"generators x{config.generator.count}", "replay buffer"]
    model_scorers = sum(s.runs_a_model for s in config.scorers)
    if model_scorers:
        meshes.append(f"model scorers x{model_scorers}")
    if config.env.procs:
        meshes.append(f"environments x{config.env.procs}")
    return ", ".join(meshes)
