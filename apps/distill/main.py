"""On-policy distillation on Monarch actor meshes: a student samples, a teacher scores every token.

    python -m apps.distill                                   # CPU default: trains a tiny teacher first
    python -m apps.distill teacher.path=RUN_DIR/final_model  # a teacher from an earlier apps.grpo run
    python -m apps.distill model.path=/ckpt/student teacher.path=/ckpt/teacher

The loop is GRPO's (async by default, the same run directory); the scoring tier
runs the teacher on a mesh of its own, and each token's advantage is
teacher.coef * (log pi_teacher - log pi_student), the negative per-token reverse KL.
The task reward is measured and reported, not trained on (configs/distill.yaml).
"""

from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from apps.distill.config import DistillConfig
from apps.distill.teacher import train_teacher
from forge_async.cli.app import CONFIG_DIR, launch, load_config, run_with, start
from forge_async.cli.report import report_distillation, report_grpo
from forge_async.config.schema import open_mappings

# configs/distill.yaml builds on grpo.yaml, whose defaults name `grpo_schema`: here that is
# DistillConfig (GRPOConfig plus `teacher:`).
ConfigStore.instance().store(name="grpo_schema", node=open_mappings(DistillConfig))


def prepare(cfg: DictConfig, run_dir: Path) -> DistillConfig:
    """The config, with teacher.path filled in: a teacher is trained first where none is named."""
    if not cfg.resume and cfg.teacher.path is None:
        cfg.teacher.path = str(run_dir / "teacher" / "final_model")
        config = load_config(cfg, DistillConfig)  # every key checked before the teacher's training
        train_teacher(config, run_dir)
        return config
    return load_config(cfg, DistillConfig)


@hydra.main(version_base=None, config_path=CONFIG_DIR, config_name="distill")
def hydra_main(cfg: DictConfig) -> None:
    launch(
        lambda run_dir: prepare(cfg, run_dir),
        "apps.distill",
        "distillation",
        run_with("forge_async.controller.grpo_run"),
        report_grpo,
        after=report_distillation,
    )


def main() -> None:
    start(hydra_main, DistillConfig)
