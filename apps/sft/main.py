"""Supervised fine-tuning on Monarch actor meshes: configure, build the meshes, train, report.

    python -m apps.sft                                       # CPU default: tiny model, max_digit
    python -m apps.sft task.name=dataset task.dataset=pairs.jsonl model.path=/models/Qwen3-0.6B
    python -m apps.grpo model.path=RUN_DIR/final_model ...   # then GRPO from the result

The trainer is GRPO's (TorchTitan, FSDP2, micro-batches, dtype, LR schedule) with the sft
objective: the mean negative log-likelihood of each demonstration's tokens (the task's
answer, then EOS), the prompt as context only (forge_async/losses/sft.py). A generator
whose weights follow the trainer's evaluates on held-out prompts as apps.grpo does: at
the start, every eval.every_steps steps and at the end. The run directory, resume and exit
codes are apps.grpo's. Every key of configs/sft.yaml can be overridden; docs/sft.md.
"""

from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

import forge_async  # noqa: F401  (process-wide runtime settings)
from apps.grpo.main import CONFIG_DIR, launch, load_config, report_early_end, report_evaluations, spawned_procs, start
from apps.sft.config import SFTConfig
from forge_async.config.schema import open_mappings
from forge_async.process.imports import import_frozen

ConfigStore.instance().store(name="sft_schema", node=open_mappings(SFTConfig))


async def run(config: SFTConfig, run_dir: Path) -> dict:
    """Spawn the run's procs first, then import the training half (its imports overlap theirs)."""
    async with spawned_procs(config.run_config(), run_dir) as procs:
        import_frozen("apps.sft.training")
        from apps.sft.training import train

        return await train(config, run_dir, procs)


def report(summary: dict, app: str = "apps.sft", what: str = "SFT") -> None:
    window = summary["loss_window"]
    loss = (
        f"loss {summary['loss_first']:.3f} -> {summary['loss_last']:.3f} "
        f"(NLL per demonstration token, mean of the first and last {window} steps)"
        if summary["steps"]
        else "no step trained"
    )
    print(
        f"\n== {what}: {summary['steps']} steps in {summary['wall_s']:.0f}s ==\n"
        f"{loss}\n"
        f"trained on {summary['trained']} demonstrations, {summary['trained_tokens']} completion tokens "
        f"({summary['tokens_per_s']:.0f} tokens/s)\n"
        f"run dir: {summary['run_dir']} (metrics.jsonl, plots.png, trace.json, summary.json, config.yaml, final_model/,"
        " checkpoints/, logs/)"
    )
    report_evaluations(summary)
    skipped = sum(summary["skipped_demonstrations"].values())
    if skipped:
        print(f"demonstrations skipped: {summary['skipped_demonstrations']}")
    report_early_end(summary, app)
    if summary["final_model"] and not (summary["failure"] or summary["stop_reason"]):
        print(f"continue with GRPO: {summary['grpo_command']}")


@hydra.main(version_base=None, config_path=CONFIG_DIR, config_name="sft")
def hydra_main(cfg: DictConfig) -> None:
    launch(lambda run_dir: load_config(cfg, SFTConfig), "apps.sft", "SFT", run=run, report=report)


def main() -> None:
    start(hydra_main, SFTConfig)
