"""The distillation run's config: every GRPO key (configs/grpo.yaml) plus `teacher:`."""

from dataclasses import dataclass, field

from forge_async.controller.config import GRPOConfig
from forge_async.config.keys import key
from forge_async.config.checks import AT_LEAST_1, POSITIVE, check_range
from forge_async.errors import ConfigError
from forge_async.scoring.config import ScorerConfig


@dataclass
class TeacherConfig:
    path: str | None = key(
        None,
        help=(
            "a Hugging Face checkpoint sharing the student's tokenizer (e.g. RUN_DIR/final_model of an "
            "apps.grpo run); null = train one first: GRPO from a fresh tiny model into RUN_DIR/teacher/"
        ),
        accepts="a directory, or null",
    )
    coef: float = key(1.0, help="per-token advantage = coef * (log pi_teacher - log pi_student)", accepts="> 0")
    grpo_steps: int = key(250, help="with path null: the teacher's GRPO steps", accepts=">= 1")
    seed: int = key(0, help="with path null: the teacher's tiny-model seed (the student's is model.tiny.seed)")

    def __post_init__(self) -> None:
        check_range("teacher.coef", self.coef, POSITIVE)
        check_range("teacher.grpo_steps", self.grpo_steps, AT_LEAST_1)


@dataclass
class DistillConfig(GRPOConfig):
    teacher: TeacherConfig = field(default_factory=TeacherConfig)

    def __post_init__(self) -> None:
        """The teacher becomes a scorer (teacher.path set; the app sets it before building this)."""
        if self.teacher.path is not None and not any(s.kind == "teacher" for s in self.scorers):
            self.scorers.append(ScorerConfig(kind="teacher", path=self.teacher.path, coef=self.teacher.coef))
        if self.model.path is not None and self.teacher.path is None:
            raise ConfigError(
                "teacher.path: with model.path set, name the teacher's checkpoint (a teacher is only "
                "trained here for the tiny default model)"
            )
        super().__post_init__()
