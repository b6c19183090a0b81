"""Tasks: built-in digit rewards, JSONL/Parquet prompt files, reward functions, advantages."""

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forge_async.data.episode import Completion
from forge_async.data.tasks import TaskConfig, TaskError, build_task
from forge_async.losses.advantages import group_advantages
from forge_async.models.tokenizer import build_digit_tokenizer

TOKENIZER = build_digit_tokenizer()
EOS = TOKENIZER.eos_token_id


def completion(token_ids: list[int]) -> Completion:
    text = TOKENIZER.decode(token_ids, skip_special_tokens=True)
    return Completion([11, 1, 13], token_ids, [0.0] * len(token_ids), [0] * len(token_ids), text, "stop")


def test_max_digit_prompts_and_rewards():
    task = build_task(TaskConfig(name="max_digit", num_digits=3), TOKENIZER)
    prompt = task.sample(random.Random(0))
    assert prompt.token_ids[0] == TOKENIZER.bos_token_id and prompt.token_ids[-1] == 13
    digits = [int(d) for d in prompt.text]
    assert prompt.answer == str(max(digits)) and len(digits) == 3
    right, wrong = int(prompt.answer), (int(prompt.answer) + 1) % 10
    assert task.reward(prompt, completion([right, EOS])) == 1.0
    assert task.reward(prompt, completion([right, right])) == 0.5
    assert task.reward(prompt, completion([wrong, EOS])) == 0.0
    assert task.reward(prompt, completion([EOS])) == 0.0


def test_unknown_task_names_it():
    with pytest.raises(TaskError, match="'sum_digits'"):
        build_task(TaskConfig(name="sum_digits"), TOKENIZER)


def rows():
    return [{"prompt": "47", "answer": "7"}, {"prompt": "31", "answer": "3"}]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_dataset_files_give_chat_formatted_prompts(tmp_path, suffix):
    path = tmp_path / f"prompts{suffix}"
    if suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows()))
    else:
        pq.write_table(pa.Table.from_pylist(rows()), path)
    task = build_task(TaskConfig(name="dataset", dataset=str(path)), TOKENIZER)
    prompts = {p.text: p for p in task.prompts}
    assert prompts["47"].token_ids == [11, 4, 7, 13] and prompts["47"].answer == "7"
    assert task.reward(prompts["47"], completion([7, EOS])) == 1.0
    assert task.reward(prompts["47"], completion([4, EOS])) == 0.0


def test_malformed_row_names_file_and_row(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(rows()[0]) + "\n" + json.dumps({"prompt": "12"}))
    with pytest.raises(TaskError, match=r"bad.jsonl: row 2 needs"):
        build_task(TaskConfig(name="dataset", dataset=str(path)), TOKENIZER)


def test_reward_function_that_cannot_be_imported(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(rows()[0]))
    with pytest.raises(TaskError, match="no_such_module:score"):
        build_task(TaskConfig(name="dataset", dataset=str(path), reward_fn="no_such_module:score"), TOKENIZER)


def broken_reward(answer: str, text: str) -> float:
    raise KeyError("boom")


def test_reward_function_that_raises_names_it_and_the_sample(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(rows()[0]))
    task = build_task(
        TaskConfig(name="dataset", dataset=str(path), reward_fn="test_tasks:broken_reward"), TOKENIZER
    )
    with pytest.raises(TaskError, match=r"test_tasks:broken_reward raised KeyError.*'47'"):
        task.reward(task.prompts[0], completion([7, EOS]))


def test_group_advantages_are_centred_and_scaled():
    advantages = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert advantages == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-3)
    assert group_advantages([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]  # no signal, no push
