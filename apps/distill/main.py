"""On-policy distillation on Monarch actor meshes: a student samples, a teacher scores every token.

    python -m apps.distill                                   # CPU default: trains a tiny teacher first
    python -m apps.distill teacher.path=RUN_DIR/final_model  # a teacher from an earlier apps.grpo run
    python -m apps.distill model.path=/ckpt/student teacher.path=/ckpt/teacher

The loop is GRPO's (async by default, the same run directory); the scoring tier
runs the teacher on a mesh of its own, and each token's advantage is
teacher.coef * (log pi_teacher - log pi_student), the negative per-token reverse KL.
The task reward is measured and reported, not trained on (configs/distill.yaml).
"""

import json
import statistics
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig

from apps.distill.config import DistillConfig
from apps.distill.teacher import train_teacher
from apps.grpo.main import CONFIG_DIR, launch, load_config, start
from forge_async.config.schema import open_mappings
from forge_async.observability.metrics import read_rows

# configs/distill.yaml builds on grpo.yaml, whose defaults name `grpo_schema`: here that is
# DistillConfig (GRPOConfig plus `teacher:`).
ConfigStore.instance().store(name="grpo_schema", node=open_mappings(DistillConfig))

WINDOW = 10  # steps averaged for the report's first and last figures


def prepare(cfg: DictConfig, run_dir: Path) -> DistillConfig:
    """The config, with teacher.path filled in: a teacher is trained first where none is named."""
    if not cfg.resume and cfg.teacher.path is None:
        cfg.teacher.path = str(run_dir / "teacher" / "final_model")
        config = load_config(cfg, DistillConfig)  # every key checked before the teacher's training
        train_teacher(config, run_dir)
        return config
    return load_config(cfg, DistillConfig)


def report_distillation(summary: dict) -> None:
    """The reverse KL to the teacher at the start and end of the run, and the teacher's own reward."""
    run_dir = Path(summary["run_dir"])
    rows, _ = read_rows(run_dir)
    kl = [r["distill/reverse_kl"] for r in rows if "distill/reverse_kl" in r]
    if not kl:
        return
    window = max(1, min(WINDOW, len(kl) // 2))
    line = f"reverse KL to the teacher {statistics.fmean(kl[:window]):.3f} -> {statistics.fmean(kl[-window:]):.3f}"
    teacher_summary = run_dir / "teacher" / "summary.json"
    if teacher_summary.is_file():
        line += f" (teacher's own reward {json.loads(teacher_summary.read_text())['reward_last']:.2f})"
    print(line)


@hydra.main(version_base=None, config_path=CONFIG_DIR, config_name="distill")
def hydra_main(cfg: DictConfig) -> None:
    launch(lambda run_dir: prepare(cfg, run_dir), "apps.distill", "distillation", after=report_distillation)


def main() -> None:
    start(hydra_main, DistillConfig)
