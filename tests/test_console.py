"""What a run says on the console: commands to type next name the interpreter that ran it; the start's
evaluation prints before step 1; a rate not measured yet says so; a game's evaluations report wins,
not pass@k; a reasoning-gym run that cannot learn from random weights says so at start."""

import sys
import typing
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from forge_async.cli.app import cold_start_note
from forge_async.cli.report import report_evaluations, report_grpo
from forge_async.observability.run_summary import RunSummary
from forge_async.observability.metrics import MetricsLog
from forge_async.observability.step_figures import PipelineFigures, TokenRate
from forge_async.process.interpreter import module_command, python
from tests.support.app_config import app_config

pytestmark = pytest.mark.unit


def test_a_command_to_type_names_the_interpreter_as_typed_from_the_working_directory(monkeypatch, tmp_path):
    venv_python = str(tmp_path / ".venv" / "bin" / "python")
    assert python(venv_python, tmp_path) == ".venv/bin/python"
    assert python(venv_python, tmp_path / "elsewhere") == venv_python  # outside it: the whole path
    assert python(str(tmp_path / "python"), tmp_path) == "./python"  # never a bare name, looked up on PATH
    assert python("/opt/my env/bin/python", Path("/")) == "'opt/my env/bin/python'"  # quoted for a shell
    monkeypatch.setattr(sys, "executable", venv_python)
    monkeypatch.chdir(tmp_path)
    assert module_command("apps.grpo", "resume=runs/a b") == ".venv/bin/python -m apps.grpo 'resume=runs/a b'"


def step_row(step: int, tokens_per_s: float | None = 1000.0) -> dict:
    row = {
        "step": step,
        "reward/mean": 0.5,
        "policy/age_mean": 1.0,
        "policy/age_max": 1,
        "samples/dropped_stale": 0,
        "samples/dropped_other": 0,
        "samples/not_started": 0,
        "train/idle_frac": 0.2,
        "train/entropy": 1.0,
        "time/wall_s": 0.1 * step,
    }
    return row if tokens_per_s is None else {**row, "generator/tokens_per_s": tokens_per_s}


def eval_row(version: int, **figures) -> dict:
    return {
        "eval/version": version,
        "eval/reward_mean": 0.25,
        "eval/pass@k": 0.0,
        "eval/len_mean": 1.0,
        "eval/prompts": 8,
        "eval/samples_per_prompt": 1,
        "eval/dropped": 0,
        "eval/seconds": 0.1,
        **figures,
    }


def test_the_starts_evaluation_prints_before_the_step_lines_it_ran_beside(tmp_path, capsys):
    log = MetricsLog(tmp_path, total_steps=4, target_reward=0.8)
    log.hold_step_lines()  # the evaluation of version 0 started beside the first steps
    log.log(step_row(1))
    log.log(step_row(2))
    assert capsys.readouterr().out == ""
    log.log_eval(2, eval_row(0))
    log.log(step_row(3))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" |")[0] for line in lines] == ["eval v0", "step    1/4", "step    2/4", "step    3/4"]
    log.hold_step_lines()
    log.log(step_row(4))
    log.close()  # an evaluation a failure cancelled prints no line: the end releases what it held
    assert capsys.readouterr().out.startswith("step    4/4")


def test_a_rate_not_measured_yet_is_no_figure(tmp_path, capsys):
    """A resumed run's first step may train on episodes its checkpoint kept: no generate call has
    come back, so there is no rate yet (not a rate of 0)."""
    rate = TokenRate(tokens=5000)
    assert rate.mark(5000) is None
    assert rate.mark(5600) > 0
    zeros = {f.name: 0 for f in fields(PipelineFigures) if "key" in f.metadata}
    row = PipelineFigures(**{**zeros, "generator_tokens_per_s": None}).row()
    assert "generator/tokens_per_s" not in row and row["time/wall_s"] == 0
    log = MetricsLog(tmp_path, total_steps=4, target_reward=0.8)
    log.log(step_row(1, tokens_per_s=None))
    assert "| gen - tok/s |" in capsys.readouterr().out
    log.close()


def test_a_games_evaluation_reports_wins_not_pass_at_k(tmp_path, capsys):
    """A game's rewards (a win 1, a loss -1) have no pass mark: its lines say the share won."""
    log = MetricsLog(tmp_path, total_steps=4, target_reward=0.8)
    log.log_eval(0, eval_row(0, **{"eval/won_frac": 0.5}))
    log.log_eval(4, eval_row(4))
    game, task = capsys.readouterr().out.splitlines()
    assert "| won 0.50 |" in game and "pass@" not in game
    assert "| pass@1 0.00 |" in task and "won" not in task
    report_evaluations(
        SimpleNamespace(
            eval_first=eval_row(0, **{"eval/won_frac": 0.25}), eval_last=eval_row(4, **{"eval/won_frac": 0.75})
        )
    )
    assert capsys.readouterr().out.rstrip().endswith("won 0.25 -> 0.75")
    log.close()


@pytest.mark.parametrize("target", [0.8, None], ids=["a task", "a game"])
def test_the_reports_reward_line_names_a_target_only_where_there_is_one(capsys, target):
    """summary.json's target_reward is null for a game (env.seats): a win's and a loss's rewards,
    in [-1, 1], have no mark to reach."""
    hints = typing.get_type_hints(RunSummary)
    summary: dict = {f.name: [] if typing.get_origin(hints[f.name]) is list else 0 for f in fields(RunSummary)}
    summary.update(
        mode="async", cut_short=[], rival=None, eval_first=None, eval_last=None, failure=None, stop_reason=None,
        target_reward=target, target_reached=None, steps=4, reward_first=0.1, reward_last=0.2, run_dir="RUN",
    )  # fmt: skip
    report_grpo(summary, "apps.grpo", "GRPO")
    rewards = capsys.readouterr().out.splitlines()[2]
    assert rewards == ("reward 0.10 -> 0.20 (target 0.8 not reached)" if target else "reward 0.10 -> 0.20")


def test_reasoning_gym_from_random_weights_says_at_start_that_it_needs_sft_first():
    note = cold_start_note(app_config(config_name="reasoning_gym"))
    assert note is not None and note.startswith("note: task.name=reasoning_gym")
    assert "<answer>...</answer>" in note and "-m apps.sft --config-name sft_reasoning_gym" in note
    assert cold_start_note(app_config("model.path=/models/sft", config_name="reasoning_gym")) is None  # fine-tuned
    assert cold_start_note(app_config("task.reasoning_gym.answer_tag=null", config_name="reasoning_gym")) is None
    assert cold_start_note(app_config()) is None  # the digit task learns from scratch
