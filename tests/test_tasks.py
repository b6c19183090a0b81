"""Tasks: built-in digit rewards, prompt datasets checked at load, reward functions, advantages."""

import random

import pytest

from forge_async.data.episode import Completion
from forge_async.config.callables import CallableError
from forge_async.tasks.config import TaskConfig
from forge_async.envs.registry import build_task
from forge_async.tasks.task import TaskError
from forge_async.errors import ConfigError
from forge_async.losses.advantages import group_advantages
from tests.support.digits import EOS_ID, ROOM, TOKENIZER
from tests.support.prompt_files import dataset_task, write_rows

pytestmark = pytest.mark.unit


def completion(token_ids: list[int]) -> Completion:
    text = TOKENIZER.decode(token_ids, skip_special_tokens=True)
    return Completion([11, 1, 13], token_ids, [0.0] * len(token_ids), [0] * len(token_ids), text, "stop")


def test_max_digit_prompts_and_rewards():
    task = build_task(TaskConfig(name="max_digit", num_digits=3), TOKENIZER, ROOM)
    prompt = task.sample(random.Random(0))
    assert prompt.token_ids[0] == TOKENIZER.bos_token_id and prompt.token_ids[-1] == 13
    digits = [int(d) for d in prompt.text]
    assert prompt.answer == str(max(digits)) and len(digits) == 3
    right, wrong = int(prompt.answer), (int(prompt.answer) + 1) % 10
    assert task.reward(prompt, completion([right, EOS_ID])) == 1.0
    assert task.reward(prompt, completion([right, right])) == 0.5
    assert task.reward(prompt, completion([wrong, EOS_ID])) == 0.0
    assert task.reward(prompt, completion([EOS_ID])) == 0.0


def test_copy_digits_answers_are_the_prompt_digits_and_rewards_are_positional():
    task = build_task(TaskConfig(name="copy_digits", num_digits=4), TOKENIZER, ROOM)
    prompt = task.sample(random.Random(0))
    digits = [int(d) for d in prompt.answer]
    assert prompt.answer == prompt.text and len(digits) == 4
    wrong_first = [(digits[0] + 1) % 10, *digits[1:]]
    assert task.reward(prompt, completion([*digits, EOS_ID])) == 1.0
    assert task.reward(prompt, completion([*wrong_first, EOS_ID])) == 0.75
    assert task.reward(prompt, completion([*digits, digits[0]])) == 0.5  # no EOS after the answer
    assert task.reward(prompt, completion([EOS_ID])) == 0.0


def test_min_digits_varies_the_prompt_length_and_the_copy_answer_with_it():
    task = build_task(TaskConfig(name="copy_digits", num_digits=8, min_digits=1), TOKENIZER, ROOM)
    rng = random.Random(0)
    prompts = [task.sample(rng) for _ in range(400)]
    assert {len(p.text) for p in prompts} == set(range(1, 9))  # answers 1-8 digits, + EOS: 2-9 tokens
    assert all(p.answer == p.text and p.token_ids == [11, *map(int, p.text), 13] for p in prompts)
    short = next(p for p in prompts if len(p.text) == 1)
    assert task.reward(short, completion([int(short.text), EOS_ID])) == 1.0


def test_min_digits_null_or_num_digits_draws_the_prompts_a_fixed_count_drew():
    for min_digits in (None, 3):
        task = build_task(TaskConfig(name="max_digit", num_digits=3, min_digits=min_digits), TOKENIZER, ROOM)
        rng, before = random.Random(1), random.Random(1)
        assert [task.sample(rng).text for _ in range(3)] == [
            "".join(str(before.randrange(10)) for _ in range(3)) for _ in range(3)
        ]


@pytest.mark.parametrize("min_digits", [0, 9])
def test_min_digits_out_of_range_fails_naming_it(min_digits):
    named = rf"task.min_digits={min_digits}: must be in \[1, 8\] or null \(at most task.num_digits\)"
    with pytest.raises(ConfigError, match=named):
        TaskConfig(name="copy_digits", num_digits=8, min_digits=min_digits)


def test_unknown_task_names_it():
    with pytest.raises(TaskError, match="'sum_digits'"):
        build_task(TaskConfig(name="sum_digits"), TOKENIZER, ROOM)


def test_digit_prompts_that_cannot_fit_the_context_fail_naming_num_digits():
    build_task(TaskConfig(name="first_digit", num_digits=59), TOKENIZER, ROOM)  # BOS 59 SEP = 61
    with pytest.raises(TaskError, match=r"task.num_digits=60 makes 62-token prompts; .* leaves 61"):
        build_task(TaskConfig(name="first_digit", num_digits=60), TOKENIZER, ROOM)


def test_max_tokens_that_fill_the_context_fail_naming_it():
    with pytest.raises(TaskError, match="sampling.max_tokens leaves no room"):
        build_task(TaskConfig(name="max_digit"), TOKENIZER, 0)


def rows():
    return [{"prompt": "47", "answer": "7"}, {"prompt": "031", "answer": "3"}]


@pytest.mark.parametrize("name", ["prompts.jsonl", "prompts.parquet", "prompts.csv", "saved_dataset"])
def test_each_source_gives_chat_formatted_prompts(tmp_path, capfd, name):
    path = write_rows(tmp_path / name, rows())
    capfd.readouterr()  # what writing it printed
    task = dataset_task(path)
    prompts = {p.text: p for p in task.prompts}
    assert prompts["47"].token_ids == [11, 4, 7, 13] and prompts["47"].answer == "7"
    assert prompts["031"].token_ids == [11, 0, 3, 1, 13]  # CSV text stays text: no "31" or 31.0
    assert task.reward(prompts["47"], completion([7, EOS_ID])) == 1.0
    assert task.reward(prompts["47"], completion([4, EOS_ID])) == 0.0
    assert task.skipped_rows == {"missing_column": 0, "empty_prompt": 0, "too_long": 0}
    out, err = capfd.readouterr()
    assert out == "dataset: kept 2 of 2 rows\n"
    assert err == ""  # no progress bars or log lines from `datasets`


def test_column_mapping_and_chat_message_prompts(tmp_path):
    path = write_rows(
        tmp_path / "chat.jsonl",
        [{"question": [{"role": "user", "content": "58"}], "solution": 8, "id": 1}],
    )
    task = dataset_task(path, prompt_column="question", answer_column="solution")
    assert task.prompts[0].token_ids == [11, 5, 8, 13]
    assert task.prompts[0].answer == "8" and task.prompts[0].text == "58"


def test_a_column_the_dataset_lacks_is_named_with_the_columns_it_has(tmp_path):
    path = write_rows(tmp_path / "p.csv", [{"question": "47", "answer": "7"}])
    named = r"p.csv has no column 'prompt' \(task.prompt_column\); its columns: question, answer"
    with pytest.raises(TaskError, match=named):
        dataset_task(path)


BAD_ROWS = {
    "missing_column": ({"prompt": "12"}, r"row 2: no value in column 'answer'"),
    "empty_prompt": ({"prompt": "  ", "answer": "1"}, r"row 2: the prompt is empty"),
    "too_long": ({"prompt": "1" * 60, "answer": "1"}, r"row 2: the prompt is 62 tokens; the context leaves 61"),
}


@pytest.mark.parametrize("reason", BAD_ROWS)
def test_a_bad_row_fails_at_load_naming_file_and_row(tmp_path, reason):
    bad_row, problem = BAD_ROWS[reason]
    path = write_rows(tmp_path / "bad.jsonl", [rows()[0], bad_row, rows()[1]])
    with pytest.raises(TaskError, match=rf"bad.jsonl: {problem}.*task.skip_bad_rows=true"):
        dataset_task(path)


def test_skip_bad_rows_skips_and_counts_them_by_reason(tmp_path, capsys):
    bad = [BAD_ROWS[reason][0] for reason in ("too_long", "missing_column", "too_long", "empty_prompt")]
    task = dataset_task(write_rows(tmp_path / "p.jsonl", bad + rows()), skip_bad_rows=True)
    assert [p.text for p in task.prompts] == ["47", "031"]
    assert task.skipped_rows == {"missing_column": 1, "empty_prompt": 1, "too_long": 2}
    assert capsys.readouterr().out == (
        "dataset: kept 2 of 6 rows (skipped: missing_column 1, empty_prompt 1, too_long 2)\n"
    )


def test_a_dataset_with_every_row_skipped_is_an_error(tmp_path):
    path = write_rows(tmp_path / "p.jsonl", [BAD_ROWS["too_long"][0]])
    with pytest.raises(TaskError, match=r"p.jsonl: every row was skipped \(too_long 1\)"):
        dataset_task(path, skip_bad_rows=True)


def test_a_prompt_that_is_neither_text_nor_messages_is_named(tmp_path):
    path = write_rows(tmp_path / "p.jsonl", [{"prompt": 47, "answer": "7"}])
    with pytest.raises(TaskError, match=r"p.jsonl: row 1: column 'prompt' holds int 47"):
        dataset_task(path, skip_bad_rows=True)  # not a row to skip: the column is wrong


def test_an_unreadable_file_names_it_and_what_is_wrong(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"prompt": "47", "answer": "7"}\n{"prompt": "31"\n')
    with pytest.raises(TaskError, match=r"broken.jsonl cannot be read: JSON parse error"):
        dataset_task(path)


# Line 3 holds "5é6" in Latin-1 (é = the single byte 0xe9); line 2 a UTF-8 "é" (two bytes), which is fine.
NOT_UTF8 = {
    "p.jsonl": (b'{"prompt": "47", "answer": "7"}\n{"prompt": "\xc3\xa9", "answer": "7"}\n{"prompt": "5\xe96"}\n', 14),
    "p.json": (b'[{"prompt": "47", "answer": "7"},\n{"prompt": "\xc3\xa9", "answer": "7"},\n{"prompt": "5\xe96"}]', 14),
    "p.csv": (b"prompt,answer\n\xc3\xa9,7\n5\xe96,6\n", 2),
}


@pytest.mark.parametrize("name", NOT_UTF8)
def test_a_text_file_that_is_not_utf8_names_the_file_and_line(tmp_path, name):
    content, byte = NOT_UTF8[name]
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TaskError, match=rf"{name}: line 3 is not valid UTF-8 \(0xe9 at byte {byte} of the line\)"):
        dataset_task(path)


def test_reward_function_that_cannot_be_imported(tmp_path):
    path = write_rows(tmp_path / "p.jsonl", rows())
    with pytest.raises(CallableError, match="no_such_module:score"):
        dataset_task(path, reward_fn="no_such_module:score")


def broken_reward(answer: str, text: str) -> float:
    raise KeyError("boom")


def test_reward_function_that_raises_names_it_and_the_sample(tmp_path):
    task = dataset_task(write_rows(tmp_path / "p.jsonl", rows()), reward_fn="test_tasks:broken_reward")
    with pytest.raises(TaskError, match=r"test_tasks:broken_reward raised KeyError.*'47'"):
        task.reward(task.prompts[0], completion([7, EOS_ID]))


def test_group_advantages_are_centred_and_scaled():
    advantages = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert advantages == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-3)
    assert group_advantages([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]  # no signal, no push
