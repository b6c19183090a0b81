"""reasoning-gym as a task, on the real library: prompts, answer extraction, its own scoring,
the held-out split, per-dataset evaluation, bad input named at start, and a run end to end."""

import asyncio
import random
from contextlib import asynccontextmanager

import pytest
import reasoning_gym
from reasoning_gym.composite import DatasetSpec

from forge_async.cli.subprocess_run import run_app
from forge_async.generation.config import SamplingConfig
from forge_async.data.episode import Completion
from forge_async.errors import ConfigError
from forge_async.evaluation.config import EvalConfig
from forge_async.evaluation.evaluator import build_evaluator
from forge_async.models.tokenizer import build_byte_tokenizer
from forge_async.scoring.config import ScorerConfig, ScoringConfig
from forge_async.tasks.config import ReasoningGymConfig, ReasoningGymDataset, TaskConfig
from forge_async.tasks.reasoning_gym import ReasoningGymTask, check_config
from forge_async.envs.registry import build_task
from forge_async.tasks.task import TaskError
from tests.support.app_config import app_config

pytestmark = pytest.mark.unit

TOKENIZER = build_byte_tokenizer()
ROOM = 400
ONE_DIGIT_SUMS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
MIX = ReasoningGymConfig(
    datasets=[ReasoningGymDataset("chain_sum", 1.0, ONE_DIGIT_SUMS), ReasoningGymDataset("count_bits", 1.0, {})]
)


def task(config: ReasoningGymConfig = MIX) -> ReasoningGymTask:
    return build_task(TaskConfig(name="reasoning_gym", reasoning_gym=config), TOKENIZER, ROOM)


def completion(text: str) -> Completion:
    ids = TOKENIZER.encode(text)
    return Completion([1], ids, [0.0] * len(ids), [0] * len(ids), text, "stop")


def test_prompts_are_the_question_after_the_system_prompt_with_their_source():
    prompt = task().sample(random.Random(0))
    rendered = TOKENIZER.decode(prompt.token_ids)
    assert MIX.system_prompt in rendered and prompt.text in rendered
    assert rendered.index(MIX.system_prompt) < rendered.index(prompt.text)
    assert prompt.meta["source"] in {"chain_sum", "count_bits"} and prompt.answer == prompt.meta["entry"]["answer"]
    bare = task(ReasoningGymConfig(system_prompt=None)).sample(random.Random(0))
    assert MIX.system_prompt not in TOKENIZER.decode(bare.token_ids)


def test_the_reward_is_the_datasets_own_score_of_the_extracted_answer():
    t = task()
    prompt = next(p for p in (t.sample(random.Random(i)) for i in range(50)) if p.meta["source"] == "chain_sum")
    right, wrong = prompt.answer, str(int(prompt.answer) + 1)
    assert t.reward(prompt, completion(f"I think <answer>{wrong}</answer> no, <answer>{right}</answer>")) == 1.0
    assert t.reward(prompt, completion(f"<answer>{wrong}</answer>")) == 0.0
    assert t.reward(prompt, completion(right)) == 0.0  # no answer tag: no answer
    # What reasoning-gym itself gives, e.g. partial credit for an answer that contains the oracle:
    padded = f"<answer>{right} apples</answer>"
    expected = t.train.score_answer(f"{right} apples", prompt.meta["entry"])
    assert 0.0 < expected < 1.0 and t.reward(prompt, completion(padded)) == expected
    untagged = task(
        ReasoningGymConfig(answer_tag=None, datasets=[ReasoningGymDataset("chain_sum", 1.0, ONE_DIGIT_SUMS)])
    )
    p = untagged.sample(random.Random(1))
    assert untagged.reward(p, completion(f"  {p.answer}\n")) == 1.0
    assert t.demonstration(prompt) == f"<answer>{prompt.answer}</answer>" and untagged.demonstration(p) == p.answer


def test_held_out_prompts_come_from_the_eval_seed_and_are_never_trained_on():
    t = task(ReasoningGymConfig(datasets=[ReasoningGymDataset("chain_sum", 1.0, ONE_DIGIT_SUMS)]))
    held = t.hold_out(20)  # of 100 distinct one-digit sums: training must skip these 20 questions
    specs = [DatasetSpec("chain_sum", 1.0, ONE_DIGIT_SUMS)]
    same = reasoning_gym.create_dataset("composite", size=20, seed=MIX.eval_seed, datasets=specs)
    assert [p.text for p in held] == [same[i]["question"] for i in range(20)]
    rng = random.Random(0)
    trained = {t.sample(rng).text for _ in range(3000)}
    assert len(trained) >= 60 and not trained & {p.text for p in held}


def test_a_mix_draws_from_each_dataset_by_weight():
    weighted = ReasoningGymConfig(
        datasets=[ReasoningGymDataset("chain_sum", 3.0, ONE_DIGIT_SUMS), ReasoningGymDataset("count_bits", 1.0, {})]
    )
    t, rng = task(weighted), random.Random(0)
    sources = [t.sample(rng).meta["source"] for _ in range(2000)]
    assert 0.68 < sources.count("chain_sum") / len(sources) < 0.82


def test_evaluation_reports_the_reward_of_each_dataset_of_a_mix():
    t = task()
    prompts = t.hold_out(8)
    by_source = {s: [p for p in prompts if p.meta["source"] == s] for s in ("chain_sum", "count_bits")}
    assert all(by_source.values())

    async def generate(ids, sampling, n):  # right on every chain_sum prompt, wrong on every count_bits one
        answers = [p.answer if p.meta["source"] == "chain_sum" else "-1" for p in prompts]
        return [[completion(f"<answer>{a}</answer>")] * n for a in answers]

    @asynccontextmanager
    async def pinned():
        yield 0

    evaluator = build_evaluator(
        EvalConfig(prompts=8), prompts, [ScorerConfig()], ScoringConfig(), t, SamplingConfig(), None
    )
    row = asyncio.run(evaluator.evaluate(generate, pinned()))
    assert row["eval/reward_mean/chain_sum"] == 1.0 and row["eval/reward_mean/count_bits"] == 0.0
    assert row["eval/reward_mean"] == pytest.approx(len(by_source["chain_sum"]) / 8)


@pytest.mark.parametrize(
    "override, error, message",
    [
        (
            "task.reasoning_gym.datasets=[{name: chain_summ}]",
            TaskError,
            r"task.reasoning_gym.datasets\[0\].name='chain_summ': no such reasoning-gym dataset; did you mean chain_sum",
        ),
        (
            "task.reasoning_gym.datasets=[{name: chain_sum, config: {terms: 2}}]",
            TaskError,
            r"task.reasoning_gym.datasets\[0\].config: TypeError: .*unexpected keyword argument 'terms'",
        ),
        (
            "task.reasoning_gym.datasets=[{name: chain_sum, config: {min_terms: 5, max_terms: 2}}]",
            TaskError,
            r"task.reasoning_gym.datasets\[0\].config: AssertionError: max_terms must be >= min_terms",
        ),
        (
            "task.reasoning_gym.datasets=[{name: chain_sum, weight: 0}]",
            ConfigError,
            r"task.reasoning_gym.datasets\[0\].weight=0.0: must be > 0 \(chain_sum\)",
        ),
        ("task.reasoning_gym.datasets=[]", ConfigError, r"task.reasoning_gym.datasets: name at least one dataset"),
    ],
)
def test_bad_reasoning_gym_input_is_named_before_any_proc_starts(override, error, message):
    with pytest.raises(error, match=message):
        app_config("task.name=reasoning_gym", override).check_paths()


def test_a_prompt_the_tokenizer_cannot_read_is_named():
    from forge_async.models.tokenizer import build_digit_tokenizer

    with pytest.raises(TaskError, match=r"no tokens for part of the prompt .*model.tiny.tokenizer=bytes"):
        build_task(TaskConfig(name="reasoning_gym"), build_digit_tokenizer(), ROOM).sample(random.Random(0))


def test_check_config_accepts_the_default_mix():
    check_config(ReasoningGymConfig())


@pytest.mark.e2e
def test_a_reasoning_gym_mix_runs_end_to_end_with_per_dataset_evaluation(tmp_path):
    run = run_app(
        tmp_path / "run",
        "steps=4",
        "model.tiny.tokenizer=bytes",
        "model.tiny.max_seq_len=256",
        "sampling.max_tokens=24",
        "task.name=reasoning_gym",
        "eval.prompts=8",
        "task.reasoning_gym.datasets=[{name: chain_sum, config: {min_terms: 2, max_terms: 2, min_digits: 1,"
        " max_digits: 1}}, {name: count_bits}]",
    )
    assert run.returncode == 0, run.output
    evaluations = run.evaluations
    assert [row["eval/version"] for row in evaluations] == [0, 4]
    assert all({"eval/reward_mean/chain_sum", "eval/reward_mean/count_bits"} <= set(row) for row in evaluations)
    assert run.summary["accounting_ok"] and run.summary["steps"] == 4
