"""Supervised fine-tuning on Monarch actor meshes: configure, build the meshes, train, report.

    python -m apps.sft                                       # CPU default: tiny model, max_digit
    python -m apps.sft task.name=dataset task.dataset=pairs.jsonl model.path=/models/Qwen3-0.6B
    python -m apps.grpo model.path=RUN_DIR/final_model ...   # then GRPO from the result

The trainer is GRPO's (TorchTitan, FSDP2, micro-batches, dtype, LR schedule) with the sft
objective: the mean negative log-likelihood of each demonstration's tokens (the task's
answer, then EOS), the prompt as context only (forge_async/losses/sft.py). A generator
whose weights follow the trainer's evaluates on held-out prompts as apps.grpo does: at
the start, every eval.every_steps steps and at the end. The run directory, resume and exit
codes are apps.grpo's. Every key of configs/sft.yaml can be overridden; docs/sft.md. The run:
forge_async/controller/sft_run.py.
"""

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from apps.sft.config import SFTConfig
from forge_async.cli.app import CONFIG_DIR, launch, load_config, run_with, start
from forge_async.cli.report import report_sft
from forge_async.config.schema import open_mappings

ConfigStore.instance().store(name="sft_schema", node=open_mappings(SFTConfig))


@hydra.main(version_base=None, config_path=CONFIG_DIR, config_name="sft")
def hydra_main(cfg: DictConfig) -> None:
    launch(
        lambda run_dir: load_config(cfg, SFTConfig),
        "apps.sft",
        "SFT",
        run_with("forge_async.controller.sft_run"),
        report_sft,
    )


def main() -> None:
    start(hydra_main, SFTConfig)
