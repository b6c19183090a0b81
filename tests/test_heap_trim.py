"""The heap trimmer: one daemon thread per process, on glibc."""

import threading

from forge_async.process.heap_trim import start_heap_trimmer


def test_one_trimming_thread_a_process_however_often_started():
    start_heap_trimmer()
    start_heap_trimmer()
    trimmers = [t for t in threading.enumerate() if t.name == "heap-trim"]
    assert len(trimmers) == 1 and trimmers[0].daemon
