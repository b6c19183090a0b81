"""Prompt data sets written to disk in each format the dataset task reads, and the task over one."""

import csv
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq

from forge_async.tasks.config import TaskConfig
from forge_async.envs.registry import build_task
from forge_async.tasks.task import Task
from tests.support.digits import ROOM, TOKENIZER


def write_rows(path: Path, rows: list[dict]) -> Path:
    """`rows` in the format `path`'s suffix names; no suffix: a save_to_disk directory."""
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    elif path.suffix == ".csv":
        with path.open("w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    elif path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def dataset_task(path: Path, **options) -> Task:
    return build_task(TaskConfig(name="dataset", dataset=str(path), **options), TOKENIZER, ROOM)
