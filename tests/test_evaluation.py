"""Evaluation during training: held-out prompts, its figures, and a generator that keeps one
version for an evaluation. The app-level rows are checked in test_learning and test_environments."""

import asyncio
import random
import time
from contextlib import asynccontextmanager

import pytest
from safetensors.torch import load_file

from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.tasks.config import TaskConfig
from forge_async.envs.registry import build_task
from forge_async.tasks.task import TaskError
from forge_async.evaluation.config import EvalConfig
from forge_async.evaluation.evaluator import build_evaluator, check_pinned, held_out_prompts
from forge_async.handles import meshes
from forge_async.scoring.config import ScorerConfig, ScoringConfig
from forge_async.weights.config import WeightsConfig
from forge_async.weights.shared_memory import SharedMemoryChannel
from tests.support.digits import EOS_ID, ROOM, TOKENIZER
from tests.support.meshes import spawn_generator
from tests.support.prompt_files import dataset_task, write_rows

pytestmark = pytest.mark.unit


def digit_task(name: str = "max_digit", num_digits: int = 3):
    return build_task(TaskConfig(name=name, num_digits=num_digits), TOKENIZER, ROOM)


def test_built_in_tasks_hold_out_the_same_prompts_in_every_run_and_never_train_on_them():
    task = digit_task()
    held = task.hold_out(64)
    assert len({p.text for p in held}) == 64
    assert [p.text for p in digit_task().hold_out(64)] == [p.text for p in held]  # a fixed split
    rng = random.Random(0)
    trained = {task.sample(rng).text for _ in range(5000)}
    assert len(trained) > 900 and not trained & {p.text for p in held}  # every other prompt, none of those
    with pytest.raises(TaskError, match=r"eval.prompts=6 would hold out more than half of task max_digit's 10"):
        digit_task(num_digits=1).hold_out(6)


def test_tool_lookup_holds_out_prompts_with_their_tables():
    task = build_task(TaskConfig(name="tool_lookup"), TOKENIZER, ROOM)
    held = task.hold_out(8)
    assert len({(p.text, tuple(p.meta["table"])) for p in held}) == 8
    assert all(p.answer == str(p.meta["table"][p.meta["key"]]) for p in held)


def test_a_dataset_holds_out_a_fixed_split_or_reads_eval_dataset(tmp_path):
    rows = [{"prompt": f"{i}{i}", "answer": str(i)} for i in range(10)]
    path = write_rows(tmp_path / "train.jsonl", rows)
    task = dataset_task(path)
    held = held_out_prompts(EvalConfig(prompts=3), task, TaskConfig(name="dataset", dataset=str(path)), TOKENIZER, ROOM)
    assert len(held) == 3 and len(task.prompts) == 7
    assert not {p.text for p in held} & {p.text for p in task.prompts}
    again = dataset_task(path)
    assert [p.text for p in again.hold_out(3)] == [p.text for p in held]
    with pytest.raises(TaskError, match=r"eval.prompts=4 would hold out more than half of the 7 prompts"):
        task.hold_out(4)
    # eval.dataset: its first eval.prompts rows; the training rows stay whole.
    eval_path = write_rows(tmp_path / "eval.csv", [{"prompt": "55", "answer": "5"}, {"prompt": "66", "answer": "6"}])
    config = EvalConfig(prompts=1, dataset=str(eval_path))
    task = dataset_task(path)
    held = held_out_prompts(config, task, TaskConfig(name="dataset", dataset=str(path)), TOKENIZER, ROOM)
    assert [p.text for p in held] == ["55"] and len(task.prompts) == 10
    missing_column = write_rows(tmp_path / "bad.jsonl", [{"question": "55", "answer": "5"}])
    with pytest.raises(TaskError, match=r"eval.dataset .*bad.jsonl has no column 'prompt'"):
        held_out_prompts(EvalConfig(dataset=str(missing_column)), task, TaskConfig(name="dataset"), TOKENIZER, ROOM)


def completion(tokens: list[int], version: int) -> Completion:
    text = TOKENIZER.decode(tokens, skip_special_tokens=True)
    return Completion([11, 1, 13], tokens, [0.0] * len(tokens), [version] * len(tokens), text, "stop")


def test_pass_at_k_mean_at_k_and_length_by_hand():
    """Three prompts, k=2. Rewards: prompt 1 (1.0, 0.0), prompt 2 (0.5, 0.0), prompt 3 (1.0, 1.0)."""
    task = digit_task()
    prompts = task.hold_out(3)
    answers = [int(p.answer) for p in prompts]
    wrong = [(a + 1) % 10 for a in answers]
    samples = [
        [[answers[0], EOS_ID], [wrong[0], EOS_ID]],
        [[answers[1]], [wrong[1], EOS_ID, EOS_ID]],
        [[answers[2], EOS_ID], [answers[2], EOS_ID]],
    ]
    calls, held = [], []

    @asynccontextmanager
    async def pinned():
        held.append(True)
        yield 7
        held.append(False)

    async def generate(ids, sampling, n):
        calls.append((ids, sampling, n, held[-1]))
        return [[completion(tokens, version=7) for tokens in group] for group in samples]

    evaluator = build_evaluator(
        EvalConfig(prompts=3, samples_per_prompt=2),
        prompts,
        [ScorerConfig()],
        ScoringConfig(),
        task,
        SamplingConfig(temperature=0.7),
        None,
    )
    row = asyncio.run(evaluator.evaluate(generate, pinned()))
    assert row["eval/version"] == 7
    assert row["eval/reward_mean"] == pytest.approx((1.0 + 0.0 + 0.5 + 0.0 + 1.0 + 1.0) / 6)
    assert row["eval/pass@k"] == pytest.approx(2 / 3)  # prompt 2's best is 0.5 < pass_reward 1.0
    assert row["eval/len_mean"] == pytest.approx((2 + 2 + 1 + 3 + 2 + 2) / 6)
    assert (row["eval/prompts"], row["eval/samples_per_prompt"], row["eval/dropped"]) == (3, 2, 0)
    ((ids, sampling, n, pinned_then),) = calls
    assert ids == [p.token_ids for p in prompts] and n == 2 and pinned_then and held == [True, False]
    assert sampling.temperature == 0.7  # k > 1: the training temperature; k = 1: greedy
    greedy = build_evaluator(EvalConfig(), prompts, [ScorerConfig()], ScoringConfig(), task, SamplingConfig(), None)
    assert greedy.sampling.temperature == 0.0


def test_an_evaluation_that_saw_two_versions_is_an_error():
    task = digit_task()
    episodes, _ = asyncio.run(
        build_evaluator(
            EvalConfig(), [], [ScorerConfig()], ScoringConfig(), task, SamplingConfig(), None
        ).scoring.score(task.hold_out(1), [[completion([1, EOS_ID], 3), completion([2, EOS_ID], 4)]], 0)
    )
    with pytest.raises(RuntimeError, match=r"pinned at version 3 has tokens of versions \[3, 4\]"):
        check_pinned(episodes, 3)


@pytest.mark.procs
def test_a_generator_keeps_one_version_while_held_across_calls(tiny_checkpoint, tmp_path):
    """Versions published while the generator holds its weights wait: for the call decoding
    then, and for calls made later, until it is released. A hold starts from the newest."""
    weights = WeightsConfig(transport="shm", channel_dir=str(tmp_path / "channel"))
    procs, generator = spawn_generator(tiny_checkpoint, weights)
    channel = SharedMemoryChannel(weights.channel_dir)
    state = load_file(str(tiny_checkpoint.path / "model.safetensors"))
    long = SamplingConfig(max_tokens=50, min_tokens=50)
    prompts = [[11, d, 13] for d in range(10)]

    def versions(groups) -> set[int]:
        return {v for group in groups for c in group for v in c.versions}

    try:
        assert generator.hold_weights.call_one(True).get() == 0
        call = generator.generate.call_one(prompts, long, 8)
        time.sleep(0.05)  # the call is decoding
        channel.write(1, state)
        assert versions(call.get()) == {0}
        time.sleep(0.1)  # the engine loop looks for new weights every few ms
        assert versions(generator.generate.call_one(prompts, long, 2).get()) == {0}
        generator.hold_weights.call_one(False).get()
        assert _eventually(lambda: generator.get_version.call_one().get() == 1)
        channel.write(2, state)
        assert _eventually(lambda: generator.get_version.call_one().get() == 2)  # released: it swaps again
        # A hold takes the channel's newest version first: calls admitted before it count on it.
        for version in (3, 4, 5):
            channel.write(version, state)
            assert generator.hold_weights.call_one(True).get() == version
            generator.hold_weights.call_one(False).get()
    finally:
        asyncio.run(meshes.stop_all(procs))


def _eventually(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False
