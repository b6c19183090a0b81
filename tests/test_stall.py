"""A run that cannot progress stops with one line; drops are said at a steady rate (rollout/progress_watch.py).

Unit tests of the watch's rule and lines, then app runs in which every episode fails: an agent
that raises (async), an environment whose reset raises (sync), a reward function that returns text
(dropped with scoring.on_error=drop). Each ends with exit status 1, one `stopped early:` line naming
the reason, the count and the first error, and summary.json written.
"""

import asyncio
import json
import re

import pytest

from forge_async.cli.subprocess_run import run_app
from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.evaluation.config import EvalConfig
from forge_async.evaluation.evaluator import build_evaluator
from forge_async.observability.metrics import MetricsLog
from forge_async.rollout.progress_watch import ProgressWatch, RunStalled
from forge_async.rollout.config import StallConfig
from forge_async.scoring.config import ScorerConfig, ScoringConfig
from forge_async.tasks.config import TaskConfig
from forge_async.envs.registry import build_task
from tests.support.digits import EOS_ID, ROOM, TOKENIZER

pytestmark = pytest.mark.unit

RESET_ERROR = "reset() raised ValueError: no such table"


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(limit: int = 64, every_s: float = 10.0) -> tuple[ProgressWatch, Clock]:
    clock = Clock()
    return ProgressWatch(StallConfig(max_dropped_episodes=limit, report_every_s=every_s), clock), clock


def test_the_watch_stops_a_run_once_max_dropped_episodes_in_a_row_were_dropped_with_none_kept():
    progress, _ = watch(limit=64)
    for group in range(7):
        progress.note(0, {"env_error": 8}, {"env_error": f"{RESET_ERROR} {group}"})
        progress.check()  # 56 dropped: below the bound
    progress.note(0, {"env_error": 6, "env_timeout": 2}, {"env_timeout": "reset() took longer than env.timeout_s=30"})
    with pytest.raises(RunStalled) as stopped:
        progress.check()
    line = str(stopped.value)
    assert "\n" not in line
    assert "the last 64 episodes were all dropped (env_error 62, env_timeout 2)" in line
    assert f"first env_error: {RESET_ERROR} 0 " in line  # the first error, not a later one
    assert "stall.max_dropped_episodes=64" in line


def test_a_kept_episode_ends_the_streak_so_a_slow_run_that_yields_never_stops():
    """Hours of drops, one kept episode in 60: never stopped, however long each takes."""
    progress, clock = watch(limit=64)
    for group in range(10_000):
        clock.now += 3600.0
        kept = 1 if group % 8 == 7 else 0
        progress.note(kept, {"env_error": 8 - kept}, {"env_error": RESET_ERROR})
        progress.check()
    never, _ = watch(limit=0)  # 0: never stops
    never.note(0, {"env_error": 10**6})
    never.check()


def test_drops_are_said_at_once_then_every_report_every_s_with_the_counts_since_the_last_line(capsys):
    progress, clock = watch(limit=0, every_s=10.0)
    progress.note(0, {"agent_error": 4}, {"agent_error": "the agent raised RuntimeError: down"})
    first = capsys.readouterr().out.splitlines()
    assert len(first) == 1 and "episode dropped (agent_error): the agent raised RuntimeError: down" in first[0]
    for second in range(1, 36):  # a group a second: 3 dropped, 1 kept
        clock.now = float(second)
        progress.note(1, {"agent_error": 3})
        progress.check()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3, lines  # at 10, 20 and 30 s
    assert lines[0].endswith("episodes dropped in the last 10s: agent_error 34; kept 10")  # the first 4 too
    assert all(line.endswith("episodes dropped in the last 10s: agent_error 30; kept 10") for line in lines[1:])
    progress.note(0, {"scorer_error": 1}, {"scorer_error": "scorer 'reward' returned 'high'"})
    assert "episode dropped (scorer_error): scorer 'reward' returned 'high'" in capsys.readouterr().out


def test_the_step_line_counts_every_drop_not_only_stale_ones(tmp_path, capsys):
    log = MetricsLog(tmp_path, total_steps=10, target_reward=0.8)
    log.log(
        {
            "step": 1,
            "reward/mean": 0.5,
            "time/wall_s": 1.0,
            "policy/age_mean": 0.0,
            "policy/age_max": 0,
            "samples/dropped_stale": 2,
            "samples/dropped_other": 120,
            "samples/not_started": 568,
            "generator/tokens_per_s": 10.0,
            "train/idle_frac": 0.5,
            "train/entropy": 1.0,
        }
    )
    log.close()
    assert "| dropped 2 stale, 120 other, 568 not started |" in capsys.readouterr().out


def evaluate_with_scorer(fn: str | None, tmp_path) -> dict:
    """A k=2 evaluation of 3 digit prompts, each answered right, scored by `fn` (None: the task's
    reward; scoring.on_error=drop); its row, logged."""
    task = build_task(TaskConfig(), TOKENIZER, ROOM)
    prompts = task.hold_out(3)

    async def generate(ids, sampling, n):
        return [[completion_of(int(p.answer)) for _ in range(n)] for p in prompts]

    evaluator = build_evaluator(
        EvalConfig(prompts=3, samples_per_prompt=2),
        prompts,
        [ScorerConfig(fn=fn)],
        ScoringConfig(on_error="drop"),
        task,
        SamplingConfig(),
        None,
    )
    row = asyncio.run(evaluator.evaluate(generate, pinned_at(3)))
    log = MetricsLog(tmp_path, total_steps=10, target_reward=0.8)
    log.log_eval(0, {**row, "time/wall_s": 1.0})
    log.close()
    return row


def test_an_evaluation_whose_samples_were_all_dropped_says_so_instead_of_a_reward(tmp_path, capsys):
    row = evaluate_with_scorer("tests.stalling:text_reward", tmp_path)
    assert (row["eval/dropped"], row["eval/dropped_scorer_error"]) == (6, 6)
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(
        r"eval v3 \| all 6 episodes dropped \(scorer_error 6\) \| 3 held-out prompts, \d+\.\ds", line
    ), line
    evaluate_with_scorer(None, tmp_path)
    assert "eval v3 | reward 1.00 | pass@2 1.00 | len 2.0" in capsys.readouterr().out  # none dropped: figures as ever


def completion_of(digit: int) -> Completion:
    return Completion([], [digit, EOS_ID], [0.0, 0.0], [3, 3], str(digit), "stop")


class pinned_at:
    """WeightDelivery.pinned's stand-in: the generator held at `version`."""

    def __init__(self, version: int):
        self.version = version

    async def __aenter__(self) -> int:
        return self.version

    async def __aexit__(self, *exc) -> None:
        return None


STALLING_RUNS = {
    "an agent that raises (async)": (
        ("--config-name=tool_lookup", "env.name=agent:tests.stalling:raising_agent"),
        "agent_error",
        "the agent raised RuntimeError: the agent's tool server is down",
    ),
    "an environment whose reset raises (sync)": (
        ("--config-name=tool_lookup", "mode=sync", "env.name=tests.stalling:BrokenResetEnv"),
        "env_error",
        "reset() raised ConnectionError: environment backend unreachable",
    ),
    "a reward function that returns text, dropped (async, single-turn)": (
        ("task.name=dataset", "task.reward_fn=tests.stalling:text_reward", "scoring.on_error=drop", "eval.prompts=10"),
        "scorer_error",
        "reward function tests.stalling:text_reward raised ValueError: could not convert string to float: 'high'",
    ),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", list(STALLING_RUNS))
def test_a_run_whose_every_episode_fails_stops_with_one_line_and_its_summary(tmp_path, case):
    overrides, reason, error = STALLING_RUNS[case]
    data = tmp_path / "prompts.jsonl"
    data.write_text(
        "\n".join(json.dumps({"prompt": f"{a}{b}", "answer": str(a)}) for a in range(10) for b in range(10))
    )
    run = run_app(
        tmp_path / "run",
        *overrides,
        f"task.dataset={data}",
        "steps=5",
        "stall.max_dropped_episodes=256",
        timeout=240,
    )
    assert run.returncode == 1, run.output
    assert "Traceback" not in run.output, run.output
    stopped = [line for line in run.output.splitlines() if line.startswith("stopped early:")]
    assert len(stopped) == 1, run.output
    assert re.search(
        rf"the last \d+ episodes were all dropped \({reason} \d+\); first {reason}: .*{re.escape(error)}", stopped[0]
    )
    assert f"episode dropped ({reason}): " in run.output  # said as it began, not only at the end
    summary = run.summary
    assert summary["steps"] == 0 and summary["failure"] == stopped[0].removeprefix("stopped early: ")
    assert summary["dropped_by_reason"][reason] >= 256
    if "eval v0" in run.output:  # an evaluation of episodes that all dropped measured nothing
        assert re.search(rf"^eval v0 \| all (\d+) episodes dropped \({reason} \1\) \|", run.output, re.M), run.output
        assert summary["eval_last"] is None
