"""RUN_DIR/summary.json of a supervised fine-tuning run (apps.sft), an SFTSummary
(observability/run_summary.py), and the GRPO command that continues from its final policy
(controller/summary.py: GRPO's)."""

import shlex
from dataclasses import fields
from pathlib import Path

from forge_async.controller.config import RunConfig
from forge_async.controller.sft_loop import SFTLoop
from forge_async.evaluation.config import EvalConfig
from forge_async.handles.run import RunHandles
from forge_async.observability.run_summary import SFTSummary
from forge_async.process.interpreter import python
from forge_async.tasks.config import TaskConfig


def write_summary(
    run_dir: Path, config: RunConfig, loop: SFTLoop, handles: RunHandles, skipped_rows: dict, final_model: str | None
) -> dict:
    """RUN_DIR/summary.json: what the run did, from its record; returns its object (cli/app.py's;
    `SFTSummary.from_json` reads it typed)."""
    record, demonstrations = loop.record, loop.demonstrations
    window, loss_first, loss_last = loop.loss_ends.means()
    wall = record.wall_s()
    summary = SFTSummary(
        objective="sft",
        **record.ending(wall),
        resumable=config.resumable,  # resume=RUN_DIR can continue it
        trained=record.trained,
        trained_tokens=demonstrations.tokens,
        skipped_demonstrations=demonstrations.skipped,
        loss_window=window,
        loss_first=loss_first,
        loss_last=loss_last,
        eval_first=record.eval_first,
        eval_last=record.eval_last,
        samples_per_s=record.trained / wall,
        tokens_per_s=demonstrations.tokens / wall,
        checkpoint_s=record.checkpoint_s,
        generator_restarts=handles.generators.restarts,
        placement=handles.placement,
        skipped_rows=skipped_rows,
        final_model=final_model,
        grpo_command=grpo_command(config, final_model),
        run_dir=str(run_dir),
    )
    summary.write(run_dir)
    return summary.to_json()


def grpo_command(config: RunConfig, final_model: str | None) -> str | None:
    """GRPO from the final policy: this run's task, held-out evaluation and completion budget (the
    task.* and eval.* keys set here; a reasoning-gym mix is left to the reader)."""
    if final_model is None:
        return None
    overrides = [shlex.quote(f"model.path={final_model}")]
    for section, defaults, left_out in (("task", TaskConfig(), "reasoning_gym"), ("eval", EvalConfig(), "every_steps")):
        for f in fields(defaults):
            value = getattr(getattr(config, section), f.name)
            if f.name != left_out and value != getattr(defaults, f.name):
                overrides.append(shlex.quote(f"{section}.{f.name}={_override_value(value)}"))
    overrides.append(f"sampling.max_tokens={config.sampling.max_tokens}")
    return " ".join([python(), "-m apps.grpo", *overrides])  # the interpreter of this run: its venv's


def _override_value(value) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)
