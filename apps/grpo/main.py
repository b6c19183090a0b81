"""GRPO on Monarch actor meshes: configure, build the meshes, run the loop, report.

    python -m apps.grpo                                  # CPU default: tiny model, max-digit task
    python -m apps.grpo mode=sync steps=50 trainer.procs=2 max_policy_age=0

Every key of configs/grpo.yaml can be overridden; see docs/configuration.md. The run:
forge_async/controller/grpo_run.py; its start, exit status and report: forge_async/cli/.
"""

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from forge_async.cli.app import CONFIG_DIR, launch, load_config, run_with, start
from forge_async.cli.report import report_grpo
from forge_async.config.schema import open_mappings
from forge_async.controller.config import GRPOConfig

ConfigStore.instance().store(name="grpo_schema", node=open_mappings(GRPOConfig))


@hydra.main(version_base=None, config_path=CONFIG_DIR, config_name="grpo")
def hydra_main(cfg: DictConfig) -> None:
    launch(
        lambda run_dir: load_config(cfg),
        "apps.grpo",
        "GRPO",
        run_with("forge_async.controller.grpo_run"),
        report_grpo,
    )


def main() -> None:
    start(hydra_main, GRPOConfig)
