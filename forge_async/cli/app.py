"""An app's life on the command line: start (argv checked, resume), its config, the run, the
report, the exit status. Each app (apps/) composes these with its config class and its training
half; see apps/grpo/main.py.

Three things here happen out of the usual order, each for the start-up's sake (docs/architecture.md,
"Start-up"):
- The run's module is imported by name (`run_with("forge_async.controller.grpo_run")`) after the
  procs are spawned: it needs torch, and the procs' imports of vLLM and TorchTitan (seconds each)
  then overlap the controller's instead of waiting behind it. So the config modules import neither
  torch, vLLM nor Monarch (tests/test_launch_config.py checks).
- `import forge_async` comes before Monarch's: it sets the process-wide environment
  (process/runtime.py) that Monarch and OpenMP read once, when they load, and that every proc
  inherits.
- OmegaConf, which Hydra composes with, knows no `Literal`: config/choices.py replaces one of its
  private functions so that a `Literal[...]` field reads as `str`, and the section checks the choice.
"""

import asyncio
import importlib
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from forge_async.controller.resume import resume_dir_from_argv, resumed_config
from forge_async.config.schema import check_override_shapes
from forge_async.controller.config import GRPOConfig
from forge_async.controller.interrupt import take_sigterm_as_ctrl_c
from forge_async.controller.startup import spawned_procs
from forge_async.errors import ConfigError, TrainerFailed, UserError
from forge_async.mesh.procs import shut_down_monarch
from forge_async.observability.console import keep_console_for_own_lines
from forge_async.observability.span_names import START_UP_IMPORTS, START_UP_LANE
from forge_async.observability.spans import TRACER
from forge_async.process import disk_full
from forge_async.process.exit import exit_app
from forge_async.process.imports import import_frozen
from forge_async.process.interpreter import module_command

# An absolute path: under `python -m`, Hydra would read a relative one as a module name.
CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "configs")

Run = Callable[[Any, Path], Coroutine[Any, Any, dict]]
Report = Callable[[dict, str, str], None]


def run_with(training: str) -> Run:
    """A run whose procs are spawned first (they start importing vLLM and TorchTitan at once),
    then `training` imported: the module whose `train(config, run_dir, procs)` runs the app
    (controller/grpo_run.py, controller/sft_run.py). It needs torch: its imports overlap theirs.
    The procs are those of `config.plan()`: what the run brings up (mesh/run_plan.py)."""

    async def run(config: Any, run_dir: Path) -> dict:
        async with spawned_procs(config, run_dir) as procs:
            with TRACER.span(START_UP_IMPORTS, START_UP_LANE):
                import_frozen(training)
            return await importlib.import_module(training).train(config, run_dir, procs)

    return run


def cold_start_note(config: Any) -> str | None:
    """The one line a GRPO run gets at start when it cannot learn as configured: a reasoning-gym
    task, whose answers count only inside their tag, on the tiny model's random weights
    (`model.path` null), which almost never writes the tag, so every reward is 0
    (configs/reasoning_gym.yaml). None for any other run."""
    task = config.task
    tag = task.reasoning_gym.answer_tag
    if config.loss.objective != "grpo" or task.name != "reasoning_gym" or tag is None or config.model.path is not None:
        return None
    sft = module_command("apps.sft", "--config-name", "sft_reasoning_gym")
    return (
        f"note: task.name=reasoning_gym on the tiny model's random weights (model.path=null) almost never "
        f"writes <{tag}>...</{tag}>, so its reward stays at 0: fine-tune it first ({sft}), then run this "
        "with model.path=SFT_RUN/final_model trainer.lr=1e-4 (docs/sft.md)"
    )


def exit_status(summary: dict) -> int:
    """0 for a run that ran its steps; 1 for one a failure stopped; 128 + signal if interrupted."""
    if summary["failure"]:
        return 1
    if summary["stop_reason"]:
        return 128 + signal.Signals[summary["stop_reason"]]
    return 0


def load_config(cfg: DictConfig, schema: type = GRPOConfig) -> Any:
    """The run's config: the composed one, or, with resume=RUN_DIR, the one saved there."""
    if cfg.resume:
        saved = resumed_config(Path(cfg.resume), HydraConfig.get().overrides.task, cfg)
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), saved))
    return OmegaConf.to_object(cfg)


def launch(
    prepare: Callable[[Path], Any],
    app: str,
    what: str,
    run: Run,
    report: Report,
    after: Callable[[dict], None] = lambda _: None,
) -> None:
    """An app's life under Hydra: its config (`prepare(run_dir)`), the run (`run(config, run_dir)`:
    `run_with`'s), the report, the exit status.

    Bad input is one line and status 2; a trainer failure, status 1 with the resume command
    (where the run can be resumed);
    `report(summary, app, what)` says how the run went (cli/report.py), `after(summary)` adds
    the app's own lines."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # Monarch starts with the run, its output sent to the logs: a run stopped before (bad input)
    # has nothing to shut down, and starting Monarch's runtime to stop it would put Monarch's
    # "internal logs are being written to /tmp/..." line on the console.
    monarch_started = False
    config = None
    try:
        config = prepare(run_dir)
        note = cold_start_note(config)
        if note is not None:
            print(note, flush=True)
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
        resumable = config is not None and config.resumable  # the trainer fails in the run: config was made
        resume = f"\nresume with: {module_command(app, f'resume={run_dir}')}" if resumable else ""
        print(f"error: {err}{resume}", file=sys.stderr)
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


def start(hydra_entry: Callable[[], None], schema: type) -> None:
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
