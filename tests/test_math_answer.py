"""forge_async.tasks.math_answer: math-verify answer checks, bounded in time, in a worker process."""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from forge_async.data.episode import Completion
from forge_async.models.tokenizer import build_digit_tokenizer
from forge_async.tasks import math_answer
from forge_async.tasks.config import TaskConfig
from forge_async.tasks.math_answer import math_verify_reward, math_verify_scorer
from forge_async.envs.registry import build_task
from forge_async.tasks.task import Prompt

pytestmark = pytest.mark.unit

HALF = "$\\frac12$"
# Without a bound, math-verify 0.9.0 (sympy 1.x) was still computing 9**(9**9) -- an integer
# of ~370 million digits -- when stopped after 590 s on this 2-core box.
PATHOLOGICAL = "The answer is $\\boxed{9^{9^{9}}}$."


@pytest.mark.parametrize("completion_text", ["\\boxed{0.5}", "1/2", "\\frac{2}{4}", "So $x = \\frac{2}{4}$."])
def test_equivalent_forms_of_a_half_score_1(completion_text):
    assert math_verify_reward(HALF, completion_text) == 1.0


def test_a_wrong_answer_scores_0():
    assert math_verify_reward(HALF, "\\boxed{0.25}") == 0.0


def test_the_answer_block_is_what_is_checked():
    assert math_verify_reward("7", "<answer>7</answer>") == 1.0
    assert math_verify_reward("7", "<think>3 + 5 = 8, no: 3 + 4</think> <answer>7</answer>") == 1.0
    assert math_verify_reward("7", "<think>it is 7</think> <answer>8</answer>") == 0.0


@pytest.mark.parametrize("completion_text", ["", "   ", "I do not know.", "<answer></answer>"])
def test_no_answer_scores_0(completion_text):
    assert math_verify_reward("7", completion_text) == 0.0


def test_a_bare_latex_gold_answer_is_read():
    assert math_verify_reward("\\frac12", "0.5") == 1.0  # math-verify reads nothing in "\frac12" alone


def test_the_scorer_form_checks_the_prompts_answer_against_the_completions_text():
    prompt = Prompt(token_ids=[1], answer=HALF, text="half?")
    assert math_verify_scorer(prompt, Completion([1], [2], [0.0], [0], "\\boxed{0.5}", "stop")) == 1.0
    assert math_verify_scorer(prompt, Completion([1], [2], [0.0], [0], "\\boxed{2}", "stop")) == 0.0


@pytest.mark.procs
def test_a_check_past_the_deadline_scores_0_in_bounded_time_and_the_worker_restarts(monkeypatch, capsys):
    assert math_verify_reward("7", "7") == 1.0  # a worker is up
    old_worker = math_answer._worker
    monkeypatch.setattr(math_answer, "TIMEOUTS", 0)
    start = time.monotonic()
    assert math_verify_reward("7", PATHOLOGICAL) == 0.0
    took = time.monotonic() - start
    assert math_answer.DEADLINE_S <= took < math_answer.DEADLINE_S + 5
    assert math_answer.TIMEOUTS == 1
    assert old_worker.returncode is not None  # killed (and reaped)
    assert "9^{9^{9}}" in capsys.readouterr().out  # the first timeout is printed
    assert math_verify_reward("7", PATHOLOGICAL, timeout=0.5) == 0.0
    assert math_answer.TIMEOUTS == 2
    assert capsys.readouterr().out == ""  # later ones are only counted
    assert math_verify_reward(HALF, "\\boxed{0.5}") == 1.0  # a fresh worker
    assert math_verify_reward(HALF, "\\boxed{3}") == 0.0


def test_threads_checking_at_once_all_get_their_own_answers():
    cases = [
        (HALF, "\\boxed{0.5}", 1.0),
        (HALF, "1/3", 0.0),
        ("7", "<answer>7</answer>", 1.0),
        ("12", "\\boxed{13}", 0.0),
    ] * 10
    with ThreadPoolExecutor(8) as pool:
        rewards = list(pool.map(lambda case: math_verify_reward(case[0], case[1]), cases))
    assert rewards == [expected for _, _, expected in cases]


def _is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


CONTROLLER = """
import os, sys, time
from forge_async.tasks import math_answer
assert math_answer.math_verify_reward("7", "7") == 1.0
print(math_answer._worker.pid, flush=True)
if sys.argv[1] == "hang":
    time.sleep(60)
"""


@pytest.mark.procs
@pytest.mark.parametrize("end", ["exit", "sigkill"])
def test_the_worker_does_not_outlive_its_controller(end):
    controller = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, "exit" if end == "exit" else "hang"], stdout=subprocess.PIPE
    )
    worker_pid = int(controller.stdout.readline())
    if end == "sigkill":  # no atexit: the worker sees its stdin close
        os.kill(controller.pid, signal.SIGKILL)
    controller.wait(timeout=30)
    controller.stdout.close()
    deadline = time.monotonic() + 10
    while _is_running(worker_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _is_running(worker_pid)


@pytest.mark.procs
def test_a_worker_left_in_a_check_kills_itself_past_the_deadline():
    """For a controller killed while its worker is in a check: nobody is left to kill it."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "forge_async.tasks.math_answer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert worker.stdout.readline() == b"ready\n"
    start = time.monotonic()
    worker.stdin.write(json.dumps({"gold": "7", "text": PATHOLOGICAL, "timeout": 0.5}).encode() + b"\n")
    worker.stdin.flush()  # and never read the reply, nor close its stdin
    try:
        assert worker.wait(timeout=30) == -signal.SIGALRM
    finally:
        worker.kill()
        worker.stdin.close()
        worker.stdout.close()
    assert time.monotonic() - start < 1 + math_answer.WORKER_GRACE_S + 5  # ceil(0.5) + grace, and slack


def test_a_dataset_task_scores_with_it(tmp_path):
    tokenizer = build_digit_tokenizer()
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "47", "answer": "\\frac{14}{2}"}) + "\n")
    reward_fn = "forge_async.tasks.math_answer:math_verify_reward"
    task = build_task(TaskConfig(name="dataset", dataset=str(path), reward_fn=reward_fn), tokenizer, 61)

    def completion(token_ids: list[int]) -> Completion:
        text = tokenizer.decode(token_ids, skip_special_tokens=True)
        zeros = [0] * len(token_ids)
        return Completion(task.prompts[0].token_ids, token_ids, [0.0] * len(token_ids), zeros, text, "stop")

    assert task.reward(task.prompts[0], completion([7, tokenizer.eos_token_id])) == 1.0  # "7" is 14/2
    assert task.reward(task.prompts[0], completion([4, tokenizer.eos_token_id])) == 0.0
