"""Supervised fine-tuning (apps.sft): the loss counts demonstration tokens only, demonstrations come
from every task source, the trainer's sft step is the demonstrations' NLL on the FSDP2 path, and
the app end to end: its loss falls and its held-out reward rises, it resumes, and its final model
loads into apps.grpo, transformers and vLLM."""

import asyncio
import json
import random
import re
import statistics
import sys

import pytest
import torch
import transformers
from hydra import compose, initialize_config_dir
from matplotlib.image import imread

import apps.grpo.main  # noqa: F401  (registers the grpo config schema)
from forge_async.cli.app import CONFIG_DIR, load_config
from forge_async.cli.subprocess_run import REPO, run_app
from forge_async.process.interpreter import python
from tests.support.doc_blocks import assert_console_as_documented
from apps.sft.config import SFTConfig
import apps.sft.main  # noqa: F401  (registers the sft config schema)
from forge_async.learning.config import TrainerConfig
from forge_async.learning.spec import LearnerSpec
from forge_async.data.batch import pack_episodes
from forge_async.tasks.demonstrations import (
    DemonstrationError,
    Demonstrations,
    demonstration_episode,
    demonstration_ids,
)
from forge_async.errors import ConfigError
from forge_async.handles import meshes
from forge_async.losses.config import LossConfig
from forge_async.losses.grpo import response_logprobs, token_logprobs, token_scale
from forge_async.losses.sft import demonstration_nll
from forge_async.models.titan import load_frozen_model
from forge_async.models.tokenizer import build_byte_tokenizer, build_digit_tokenizer
from forge_async.tasks.config import ReasoningGymConfig, ReasoningGymDataset, TaskConfig
from forge_async.envs.registry import build_task
from forge_async.tasks.task import TaskError, prompt_token_ids
from forge_async.weights.config import WeightsConfig
from tests.support.digits import PAD_ID
from tests.support.parity import assert_vllm_matches_transformers

pytestmark = pytest.mark.unit

STEPS = 40
# The CPU default (max_digit, the tiny model) on two FSDP2 ranks, each step in micro-batches.
RUN = ("eval.every_steps=20", "checkpoint.every_steps=20", "trainer.procs=2", "trainer.micro_batch_tokens=64")


# The loss


def demonstrations_of(tokenizer, pairs: list[tuple[str, str]]) -> list:
    """(prompt digits, answer) pairs as demonstration episodes."""
    return [
        demonstration_episode(prompt_token_ids(tokenizer, p), demonstration_ids(a, tokenizer), a, 0, i)
        for i, (p, a) in enumerate(pairs)
    ]


def hand_nll(model, episodes, with_prompt: bool) -> float:
    """The mean NLL per token of each whole sequence under a plain causal forward: of its
    completion's tokens, or (`with_prompt`) of every token after the first."""
    nll = []
    for episode in episodes:
        prompt, completion = episode.completion.prompt_ids, episode.completion.token_ids
        tokens = torch.tensor([prompt + completion])
        with torch.no_grad():
            logprobs = token_logprobs(model(tokens), tokens)[0]  # predicts tokens[1:]
        nll += (-logprobs if with_prompt else -logprobs[len(prompt) - 1 :]).tolist()
    return statistics.fmean(nll)


class NinesLikely(torch.nn.Module):
    """A model that finds the digit 9 likely everywhere: a prompt of 9s costs little NLL, an
    answer's EOS much, so counting the prompt's tokens would move the loss far."""

    def __init__(self, model: torch.nn.Module, nine: int):
        super().__init__()
        self.model, self.nine = model, nine

    def forward(self, tokens, positions=None, attention_mask=None):
        logits = self.model(tokens, positions, attention_mask)
        return logits + 6.0 * torch.nn.functional.one_hot(torch.tensor(self.nine), logits.shape[-1])


def test_the_loss_is_the_mean_nll_of_the_demonstration_tokens_and_never_of_the_prompt(tiny_checkpoint):
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tiny_checkpoint.path))
    model = NinesLikely(load_frozen_model(tiny_checkpoint), tokenizer.convert_tokens_to_ids("9"))
    # Long prompts of repeated digits, short answers; two demonstrations share their prompt (one row).
    episodes = demonstrations_of(tokenizer, [("999999999999", "9"), ("999999999999", "99"), ("1234", "4")])
    batch = pack_episodes(episodes, PAD_ID, token_cost=tiny_checkpoint.shape.token_cost_in_attention_pairs)
    assert batch.tokens.shape[0] == 2  # the shared prompt is one row: packing is the trainer's own
    tokens = sum(len(e.completion.token_ids) for e in episodes)
    assert tokens == 2 + 3 + 2  # each answer's tokens and EOS
    with torch.no_grad():
        logprobs = response_logprobs(model, batch)[0]
    scale = token_scale(batch.response_mask, "token_mean", len(episodes), tokens)
    loss = demonstration_nll(logprobs, batch, scale).item()
    assert loss == pytest.approx(hand_nll(model, episodes, with_prompt=False), rel=1e-5)
    # Counting the prompts' tokens would change it by far more than that tolerance.
    assert hand_nll(model, episodes, with_prompt=True) < loss - 1.0


@pytest.mark.procs
def test_the_trainer_sft_step_reports_the_demonstrations_nll_on_two_ranks_in_micro_batches(tiny_checkpoint):
    """The trainer with loss.objective=sft: two FSDP2 ranks, a 16-token budget (several
    micro-batches each): train/loss is the mean NLL of the demonstration tokens under the weights
    it stepped from, and no off-policy figure is reported (no policy sampled them)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tiny_checkpoint.path))
    rng = random.Random(0)
    digits = ["".join(rng.choice("0123456789") for _ in range(rng.randint(2, 6))) for _ in range(12)]
    pairs = [(prompt, str(rng.randrange(100))) for prompt in digits]
    episodes = demonstrations_of(tokenizer, pairs)
    expected = hand_nll(load_frozen_model(tiny_checkpoint), episodes, with_prompt=False)
    spec = LearnerSpec(
        str(tiny_checkpoint.path),
        TrainerConfig(procs=2, micro_batch_tokens=16, lr_schedule="constant"),
        PAD_ID,
        LossConfig(objective="sft"),
    )
    procs, trainer = asyncio.run(meshes.spawn_trainer(spec, WeightsConfig("torchstore")))
    try:
        metrics = [m.metrics for _, m in trainer.train_step.call(episodes).get().items()]
    finally:
        asyncio.run(meshes.stop_all(procs))
    for rank in metrics:
        assert rank["train/loss"] == pytest.approx(expected, rel=1e-5)
        assert rank["train/response_tokens"] == sum(len(e.completion.token_ids) for e in episodes)
        assert not any(key.startswith(("is/", "kl/")) or key == "train/clip_frac" for key in rank), rank


# Demonstrations from each task source


def test_digit_demonstrations_are_the_answer_then_eos_at_the_trainers_version():
    tokenizer = build_digit_tokenizer()
    task = build_task(TaskConfig(name="max_digit"), tokenizer, 60)
    source = Demonstrations(task, tokenizer, max_tokens=3, seed=0)
    episodes = source.batch(8, version=5)
    for episode in episodes:
        c = episode.completion
        digits = [int(d) for d in tokenizer.decode(c.prompt_ids, skip_special_tokens=True)]
        assert c.token_ids == [max(digits), tokenizer.eos_token_id]
        assert c.versions == [5, 5] and c.logprobs == [0.0, 0.0] and episode.advantage == 1.0
    assert source.drawn == 8 and source.tokens == 16
    # A resumed source draws what the first would have drawn next.
    resumed = Demonstrations(task, tokenizer, max_tokens=3, seed=0)
    resumed.load_state_dict(source.state_dict())
    prompts = [e.completion.prompt_ids for e in source.batch(4, 6)]
    assert [e.completion.prompt_ids for e in resumed.batch(4, 6)] == prompts


def test_dataset_demonstrations_are_the_rows_answers_as_written(tmp_path):
    rows = [{"prompt": f"What is {a} + {b}?", "answer": f"{a + b}"} for a in range(5) for b in range(5)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tokenizer = build_byte_tokenizer()
    task = build_task(TaskConfig(name="dataset", dataset=str(path)), tokenizer, 200)
    source = Demonstrations(task, tokenizer, max_tokens=4, seed=0)
    source.check()
    for episode in source.batch(10, version=0):
        c = episode.completion
        question = re.search(r"What is (\d) \+ (\d)\?", tokenizer.decode(c.prompt_ids)).groups()
        assert c.text == str(int(question[0]) + int(question[1]))
        assert c.token_ids == list(c.text.encode()) + [tokenizer.eos_token_id]  # bytes, then EOS


def test_reasoning_gym_demonstrations_wrap_the_answer_in_its_tag():
    tokenizer = build_byte_tokenizer()
    config = ReasoningGymConfig(datasets=[ReasoningGymDataset("chain_sum", 1.0, {"min_terms": 2, "max_terms": 2})])
    task = build_task(TaskConfig(name="reasoning_gym", reasoning_gym=config), tokenizer, 500)
    (episode,) = Demonstrations(task, tokenizer, max_tokens=32, seed=0).batch(1, version=0)
    c = episode.completion
    assert re.fullmatch(r"<answer>-?\d+</answer>", c.text), c.text
    assert c.token_ids[-1] == tokenizer.eos_token_id and tokenizer.decode(c.token_ids[:-1]) == c.text


def test_a_demonstration_over_the_budget_fails_naming_the_key_or_is_skipped_and_counted():
    tokenizer = build_digit_tokenizer()
    task = build_task(TaskConfig(name="copy_digits", num_digits=4, min_digits=2), tokenizer, 60)
    with pytest.raises(DemonstrationError, match=r"tokens with EOS, more than sampling.max_tokens=4"):
        Demonstrations(task, tokenizer, max_tokens=4, seed=0).batch(32, version=0)
    skipping = Demonstrations(task, tokenizer, max_tokens=4, seed=0, skip_too_long=True)
    episodes = skipping.batch(32, version=0)
    assert len(episodes) == 32 and all(len(e.completion.token_ids) <= 4 for e in episodes)
    assert skipping.skipped["too_long"] > 0


def test_text_the_tokenizer_cannot_encode_and_multi_turn_tasks_fail_at_the_check():
    digits = build_digit_tokenizer()
    with pytest.raises(DemonstrationError, match="no tokens for part of the demonstration '<answer>7</answer>'"):
        demonstration_ids("<answer>7</answer>", digits)
    tool_lookup = build_task(TaskConfig(name="tool_lookup"), digits, 60)
    with pytest.raises(TaskError, match="no single completion to imitate"):
        Demonstrations(tool_lookup, digits, max_tokens=3, seed=0).check()


def sft_config(*overrides: str) -> SFTConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return load_config(compose(config_name="sft", overrides=list(overrides)), SFTConfig)


def test_each_objective_belongs_to_its_app():
    config = sft_config()
    assert config.loss.objective == "sft" and config.task.name == "max_digit"
    assert config.plan().loss.objective == "sft"  # what the trainer is spawned with
    with pytest.raises(ConfigError, match="loss.objective=grpo: apps.sft trains on demonstrations"):
        sft_config("loss.objective=grpo")
    with pytest.raises(ConfigError, match="task.name=tool_lookup: .* no single completion to imitate"):
        sft_config("task.name=tool_lookup")
    with pytest.raises(ConfigError, match="the sft objective has no behaviour policy"):
        sft_config("loss.clip_low=0.2", "loss.clip_high=0.2")
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        with pytest.raises(ConfigError, match="loss.objective=sft: GRPO trains with the policy-gradient objective"):
            load_config(compose(config_name="grpo", overrides=["loss.objective=sft"]))


# The app


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    run = run_app(tmp_path_factory.mktemp("sft") / "run", f"steps={STEPS}", *RUN, app="apps.sft", timeout=300)
    assert run.returncode == 0, run.output
    return run


@pytest.mark.e2e
def test_sft_learns_the_cpu_default_and_writes_the_run_directory(sft_run):
    run = sft_run
    metrics = run.metrics
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    for row in metrics:
        assert {"train/loss", "train/lr", "train/tokens_per_s", "train/response_tokens", "samples/trained"} <= set(row)
        assert row["train/response_tokens"] == 32 * 2  # each demonstration: the max digit, EOS
    losses = [m["train/loss"] for m in metrics]
    assert statistics.fmean(losses[-5:]) < 0.25 * statistics.fmean(losses[:5]), losses
    assert metrics[-1]["train/lr"] < metrics[0]["train/lr"]  # the trainer's own LR schedule
    evaluations = run.evaluations
    assert [e["eval/version"] for e in evaluations][0] == 0 and evaluations[-1]["eval/version"] == STEPS
    assert evaluations[0]["eval/reward_mean"] < 0.2 < 0.8 < evaluations[-1]["eval/reward_mean"], evaluations
    summary = run.summary
    assert summary["steps"] == STEPS and summary["trained"] == STEPS * 32 and summary["trained_tokens"] == STEPS * 64
    assert summary["loss_last"] < summary["loss_first"] and summary["failure"] is None
    assert (run.run_dir / "config.yaml").read_text().count("objective: sft") == 1
    assert imread(run.run_dir / "plots.png").shape[1] >= 800
    assert "step   40/40 | loss " in run.output and f"run dir: {run.run_dir}" in run.output
    assert re.search(r"loss \d\.\d{3} -> \d\.\d{3} \(NLL per demonstration token", run.output), run.output
    # the interpreter that ran it (the venv's), as typed from the run's working directory
    grpo = f"{python(sys.executable, REPO)} -m apps.grpo model.path={run.run_dir / 'final_model'}"
    assert f"continue with GRPO: {grpo}" in run.output, run.output
    assert_console_as_documented(run.output, "sft")  # docs/sft.md
    for line in run.output.splitlines():  # third-party output is in RUN_DIR/logs
        assert not re.search(r"warn|\[W\d|WARNING|Traceback", line, re.IGNORECASE), line


@pytest.mark.e2e
def test_the_final_model_loads_and_answers_in_transformers_and_vllm(sft_run):
    final_dir = sft_run.run_dir / "final_model"
    initial_dir = sft_run.run_dir / "initial_model"
    assert (final_dir / "tokenizer.json").read_bytes() == (initial_dir / "tokenizer.json").read_bytes()
    model = transformers.AutoModelForCausalLM.from_pretrained(str(final_dir))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(final_dir))
    rng, right = random.Random(1), 0
    for _ in range(20):
        digits = [rng.randrange(10) for _ in range(3)]
        prompt = torch.tensor([prompt_token_ids(tokenizer, "".join(map(str, digits)))])
        out = model.generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        right += out[0, prompt.shape[1] :].tolist()[:2] == [max(digits), tokenizer.eos_token_id]
    assert right >= 16, right
    assert_vllm_matches_transformers(final_dir, model)  # vLLM serves it, with transformers' logprobs


@pytest.mark.e2e
def test_grpo_continues_from_the_final_model_and_measures_it_as_sft_did(sft_run, tmp_path):
    grpo = run_app(tmp_path / "grpo", f"model.path={sft_run.run_dir / 'final_model'}", "steps=3", timeout=300)
    assert grpo.returncode == 0, grpo.output
    assert grpo.metrics[0]["reward/mean"] > 0.3  # sampled at temperature 1 from the fine-tuned policy; chance ~0.05
    # The same held-out prompts, greedy, the same weights: GRPO's first evaluation is SFT's last.
    assert grpo.evaluations[0]["eval/version"] == 0
    assert grpo.evaluations[0]["eval/reward_mean"] == sft_run.evaluations[-1]["eval/reward_mean"]


@pytest.mark.e2e
def test_a_run_resumed_for_more_steps_continues_as_one_straight_run(sft_run, tmp_path):
    run_dir = tmp_path / "run"
    first = run_app(run_dir, *RUN, "steps=20", f"trainer.lr_total_steps={STEPS}", app="apps.sft", timeout=300)
    assert first.returncode == 0, first.output
    resumed = run_app(run_dir, f"resume={run_dir}", f"steps={STEPS}", app="apps.sft", timeout=300)
    assert resumed.returncode == 0, resumed.output
    assert "resumed from" in resumed.output and "at step 20 " in resumed.output
    assert [m["step"] for m in resumed.metrics] == list(range(1, STEPS + 1))  # each step once
    assert resumed.summary["steps"] == STEPS and resumed.summary["trained"] == STEPS * 32
    # The same demonstrations, the same optimizer state: the losses of the run without a break.
    straight = [m["train/loss"] for m in sft_run.metrics]
    assert [m["train/loss"] for m in resumed.metrics] == pytest.approx(straight, rel=1e-4)


@pytest.mark.e2e
def test_a_task_with_nothing_to_imitate_fails_at_start_with_one_line(tmp_path):
    run = run_app(tmp_path / "run", "task.name=tool_lookup", app="apps.sft", timeout=120)
    assert run.returncode == 2, run.output
    errors = [line for line in run.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no single completion to imitate" in errors[0], run.output
    assert "Traceback" not in run.output
