"""A teacher that is the policy itself some steps ago (`{kind: teacher, model: self, lag: K,
refresh_steps: M}`: scoring/self_teacher.py): the versions it takes aside and loads, bad input at
start, and a real run whose teacher moves only at refreshes."""

import asyncio
import math

import pytest

from forge_async.controller.config import GRPOConfig
from forge_async.errors import ConfigError
from forge_async.mesh.config import PlacementConfig
from forge_async.models.config import LoraConfig, ModelConfig
from forge_async.scoring.config import ScorerConfig, check_scorers
from forge_async.scoring.self_teacher import SelfTeacher
from forge_async.weights.config import WeightsConfig

pytestmark = pytest.mark.unit


class Channel:
    """The teacher's proc as the trainer's channel would feed it: a version taken aside is the
    one asked; `use_taken` loads it."""

    def __init__(self):
        self.calls, self.taken, self.held = [], None, 0

    async def take_version(self, version: int) -> int:
        self.calls.append(("take", version))
        self.taken = version
        return version

    async def use_taken(self) -> int:
        self.calls.append(("use", self.taken))
        self.held, self.taken = (self.taken, None) if self.taken is not None else (self.held, None)
        return self.held


def teacher_over(lag: int, refresh_steps: int, versions: int) -> tuple[SelfTeacher, Channel, list[int]]:
    """A SelfTeacher told of versions 1..`versions`; the version it holds after each."""

    async def run() -> list[int]:
        held = []
        for version in range(1, versions + 1):
            teacher.published(version)
            await asyncio.sleep(0.01)  # its worker runs beside
            held.append(teacher.version)
        await teacher.close()
        return held

    channel = Channel()
    teacher = SelfTeacher(ScorerConfig(kind="teacher", model="self", lag=lag, refresh_steps=refresh_steps), channel)
    return teacher, channel, asyncio.run(run())


def test_the_teacher_is_refreshed_every_m_steps_to_the_version_k_steps_before():
    _, channel, held = teacher_over(lag=1, refresh_steps=3, versions=9)
    assert held == [0, 0, 2, 2, 2, 5, 5, 5, 8]
    assert channel.calls == [("take", 2), ("use", 2), ("take", 5), ("use", 5), ("take", 8), ("use", 8)]
    teacher, _, held = teacher_over(lag=0, refresh_steps=2, versions=5)
    assert held == [0, 2, 2, 4, 4] and teacher.metrics() == {
        "distill/teacher_version": 4,
        "distill/teacher_lag": 1,
        "distill/teacher_refreshes": 2,
    }
    # lag = refresh_steps: each refresh loads the version taken at the one before, then takes anew
    _, channel, held = teacher_over(lag=2, refresh_steps=2, versions=6)
    assert held == [0, 0, 0, 2, 2, 4]
    assert channel.calls[:3] == [("use", None), ("take", 2), ("use", 2)]


def test_a_resumed_runs_teacher_takes_the_restored_version_then_follows_its_schedule():
    async def run() -> list[int]:
        teacher.resumed(7)  # restored at 7: versions 2..6 are gone with the run that made them
        await asyncio.sleep(0.01)
        held = [teacher.version]
        for version in (8, 9):
            teacher.published(version)
            await asyncio.sleep(0.01)
            held.append(teacher.version)
        await teacher.close()
        return held

    channel = Channel()
    teacher = SelfTeacher(ScorerConfig(kind="teacher", model="self", lag=1, refresh_steps=3), channel)
    assert asyncio.run(run()) == [7, 7, 8]
    assert channel.calls == [("take", 7), ("use", 7), ("take", 8), ("use", 8)]


def test_bad_self_teachers_fail_at_start_naming_the_key():
    check_scorers([ScorerConfig(), ScorerConfig(kind="teacher", model="self", lag=2, refresh_steps=4)])
    bad = {
        r"scorers\[1\].path=/x: a model: self teacher is the policy, it takes no path": {"path": "/x"},
        r"scorers\[1\].lag=-1": {"lag": -1},
        r"scorers\[1\].lag=5: must be in \[0, 4\] \(refresh_steps=4\)": {"lag": 5},
        r"scorers\[1\].refresh_steps=0": {"refresh_steps": 0, "lag": 0},
    }
    for message, values in bad.items():
        teacher = {"kind": "teacher", "model": "self", "refresh_steps": 4, **values}
        with pytest.raises(ConfigError, match=message):
            check_scorers([ScorerConfig(), ScorerConfig(**teacher)])
    with pytest.raises(ConfigError, match=r"scorers\[0\].model=self: only a teacher scorer is the policy itself"):
        check_scorers([ScorerConfig(model="self")])
    with pytest.raises(ConfigError, match=r"scorers\[1\].path: a teacher scorer needs .* \(or model: self\)"):
        check_scorers([ScorerConfig(), ScorerConfig(kind="teacher")])
    scorers = [ScorerConfig(), ScorerConfig(kind="teacher", model="self")]
    with pytest.raises(ConfigError, match=r"scorers\[1\].model=self: .* weights.transport=torchstore"):
        GRPOConfig(scorers=scorers, weights=WeightsConfig(transport="torchstore"))
    with pytest.raises(ConfigError, match=r"placement.trainer_hosts=\[1\] must be \[0\]"):
        GRPOConfig(scorers=scorers, placement=PlacementConfig(trainer_hosts=[1], generator_hosts=[0]))
    with pytest.raises(ConfigError, match="publishes its adapters alone"):
        GRPOConfig(scorers=scorers, model=ModelConfig(lora=LoraConfig(rank=4)))


@pytest.mark.e2e
def test_grpo_distils_from_itself_refreshed_every_two_steps(tmp_path):
    """Five steps of GRPO with a teacher that is the policy one step before each refresh (every two
    steps): the teacher holds version 0, then 1, then 3, moving only at refreshes; the reverse KL
    to it is finite; the accounting adds up."""
    from tests.support.app_runs import assert_accounting
    from forge_async.cli.subprocess_run import run_app

    run = run_app(
        tmp_path / "run",
        "steps=5",
        "scorers=[{kind:reward},{kind:teacher,model:self,lag:1,refresh_steps:2,coef:0.1}]",
        timeout=600,
    )
    assert run.returncode == 0, run.output
    assert_accounting(run.summary)
    rows = run.metrics
    held = [m["distill/teacher_version"] for m in rows]
    assert held == sorted(held) and set(held) <= {0, 1, 3} and held[0] == 0 and held[-1] >= 1, held
    assert [m["distill/teacher_refreshes"] for m in rows] == [sorted(set(held)).index(v) for v in held]
    assert all(math.isfinite(m["distill/reverse_kl"]) for m in rows)
