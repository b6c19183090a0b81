"""The heap trimmer: one daemon thread per process, on glibc."""

import threading

import pytest

from forge_async.process.heap_trim import start_heap_trimmer

pytestmark = pytest.mark.unit


def test_one_trimming_thread_a_process_however_often_started():
    start_heap_trimmer()
    start_heap_trimmer()
    trimmers = [t for t in threading.enumerate() if t.name == "heap-trim"]
    assert len(trimmers) == 1 and trimmers[0].daemon
