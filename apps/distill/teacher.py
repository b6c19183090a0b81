"""A teacher for the CPU default: GRPO on the run's task from a fresh tiny model, in RUN_DIR/teacher/.

It runs as `python -m apps.grpo` in a subprocess (its output on this console), so
the teacher is an ordinary GRPO run directory: metrics, plots, summary and
final_model/, which the distillation run then loads as its teacher.
"""

import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from apps.distill.config import DistillConfig
from forge_async.cli.subprocess_run import REPO
from forge_async.observability.console import since_launch
from forge_async.observability.run_summary import RunSummary
from forge_async.errors import UserError
from forge_async.process.interpreter import python

SHARED_SECTIONS = ("task", "sampling", "model.tiny")  # the teacher learns what the student will


class TeacherFailed(UserError):
    """The teacher's GRPO run did not finish."""


def train_teacher(config: DistillConfig, run_dir: Path) -> Path:
    """The teacher's final_model, trained now unless an earlier start of this run left one."""
    teacher_dir = run_dir / "teacher"
    final = teacher_dir / "final_model"
    if (final / "config.json").is_file():
        print(f"{since_launch()} teacher: {final} (trained earlier)", flush=True)
        return final
    overrides = [
        f"steps={config.teacher.grpo_steps}",
        f"seed={config.seed}",
        *_section_overrides(config),
        f"model.tiny.seed={config.teacher.seed}",
        f"verbose={str(config.verbose).lower()}",
    ]
    print(
        f"{since_launch()} training the teacher first: {python()} -m apps.grpo steps={config.teacher.grpo_steps}, "
        f"the student's task, sampling and model shape, tiny-model seed {config.teacher.seed} -> {teacher_dir} "
        "(every override: its config.yaml)",
        flush=True,
    )
    done = subprocess.run([sys.executable, "-m", "apps.grpo", f"hydra.run.dir={teacher_dir}", *overrides], cwd=REPO)
    if done.returncode != 0 or not (final / "config.json").is_file():
        raise TeacherFailed(f"the teacher's GRPO run failed (exit {done.returncode}); see {teacher_dir}")
    reward = RunSummary.read(teacher_dir).reward_last
    if reward is None:
        raise TeacherFailed(f"the teacher's GRPO run trained no step; see {teacher_dir}")
    print(f"{since_launch()} teacher ready: reward {reward:.2f}, {final}", flush=True)
    if reward < config.target_reward:
        print(
            f"warning: the teacher's reward {reward:.2f} is below target_reward={config.target_reward}: the "
            "student can at best approach it (raise teacher.grpo_steps, or name a better teacher.path)",
            flush=True,
        )
    print(flush=True)
    return final


def _section_overrides(config: DistillConfig) -> list[str]:
    """`key=value` for every key of the shared sections, as Hydra reads them."""
    structured = OmegaConf.structured(config)
    overrides = []
    for section in SHARED_SECTIONS:
        values = OmegaConf.to_container(OmegaConf.select(structured, section))
        if not isinstance(values, dict):  # each shared section is a dataclass: a mapping
            raise TypeError(f"{section} is not a config section")
        for key, value in values.items():
            name = f"{section}.{key!s}"  # a field's name
            if not isinstance(value, dict) and name != "model.tiny.seed":  # the teacher's own
                overrides.append(f"{name}={_hydra_value(value)}")
    return overrides


def _hydra_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return "'" + value.replace("'", "\\'") + "'"
    return str(value)
