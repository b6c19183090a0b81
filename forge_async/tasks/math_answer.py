"""Checking a math answer with `math-verify`, within a time bound.

    task.reward_fn=forge_async.tasks.math_answer:math_verify_reward        # (answer, completion_text)
    scorers=[{kind: reward, fn: "forge_async.tasks.math_answer:math_verify_scorer"}]  # (prompt, completion)

Both score 1.0 when the completion's final answer is mathematically the gold answer
(`\\boxed{0.5}`, `1/2` and `\\frac{2}{4}` all match `$\\frac12$`), else 0.0. An
`<answer>...</answer>` block, if there is one, is what gets checked (math-verify finds
nothing inside the tags); a gold answer math-verify reads nothing in is read again inside
`$...$` (a bare `\\frac12`).

math-verify bounds its own time with `signal.alarm`, which works only on a process's main
thread; reward functions run in worker threads (`asyncio.to_thread`). And sympy can run
very long on an answer such as `9^{9^{9}}` (still computing 9**(9**9) after 10 minutes).
So the check runs in a worker process with math-verify's timeouts off, and the caller
waits at most `DEADLINE_S` per check: past it,
the worker is killed (the next check starts a fresh one) and the answer scores 0.0. A
pathological answer is a wrong one, and it cost a bounded time. The first timeout is
printed; all are counted in `TIMEOUTS` (a worker that dies on an answer: `CRASHES`).

The worker:
- is a plain subprocess running this module (`python -m forge_async.tasks.math_answer`),
  not a multiprocessing child: `spawn` and `forkserver` re-import the controller's
  `__main__` in the child (a user's script without a main guard would run again), and
  `fork` copies a process that has threads and the Monarch runtime. Popen is fork+exec.
- is one per process, shared under a lock, rather than one per thread: `asyncio.to_thread`'s
  pool has up to 32 threads, and a worker holds all of sympy in memory; a check is short,
  so threads queueing for it cost little. A thread's deadline starts when it
  has the worker, so a pathological check ahead of it does not eat its time.
- starts on first use (it imports math-verify), not on import.
- does not outlive the controller: it is killed at exit (atexit); when idle it exits as
  soon as the controller's end of its pipe closes, however the controller ended; and in a
  check it kills itself (SIGALRM, default action) a few seconds past the check's deadline,
  in case no controller is left to do it.
"""

import atexit
import json
import math
import os
import re
import select
import signal
import subprocess
import sys
import threading
from typing import IO

DEADLINE_S = 2.0  # how long one check may take before it scores 0.0
START_TIMEOUT_S = 60.0  # how long a new worker may take to import math-verify
WORKER_GRACE_S = 5  # a worker in a check kills itself this long past the check's deadline

TIMEOUTS = 0  # checks that ran past their deadline (scored 0.0)
CRASHES = 0  # checks whose worker died (scored 0.0)

_LOCK = threading.Lock()
_worker: subprocess.Popen[bytes] | None = None
_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ANSWER_TAG = re.compile(r"</?answer>")


def math_verify_reward(answer: str, completion_text: str, *, timeout: float | None = None) -> float:
    """`task.reward_fn`: 1.0 if the completion's final answer equals `answer` mathematically,
    0.0 if not, or if the check took more than `timeout` seconds (None: DEADLINE_S)."""
    return float(_checked_in_worker(answer, completion_text, DEADLINE_S if timeout is None else timeout))


def math_verify_scorer(prompt, completion) -> float:
    """A `kind: reward` scorer's fn, `(Prompt, Completion)`: math_verify_reward of the prompt's
    answer and the completion's text."""
    return math_verify_reward(prompt.answer, completion.text)


def answer_text(completion_text: str) -> str:
    """What is checked: the last `<answer>...</answer>` block's content if there is one, else
    the text without any stray answer tags (a completion cut off after `<answer>`)."""
    blocks = _ANSWER_BLOCK.findall(completion_text)
    return blocks[-1] if blocks else _ANSWER_TAG.sub("", completion_text)


def is_equivalent(gold: str, completion_text: str) -> bool:
    """The check itself, unbounded: run in the worker process only."""
    from math_verify import parse, verify

    gold_parsed = parse(gold, parsing_timeout=None) or parse(f"${gold}$", parsing_timeout=None)
    predicted = parse(answer_text(completion_text), parsing_timeout=None)
    return verify(gold_parsed, predicted, timeout_seconds=None)


def _checked_in_worker(gold: str, completion_text: str, timeout: float) -> bool:
    global _worker, TIMEOUTS, CRASHES
    request = json.dumps({"gold": gold, "text": completion_text, "timeout": timeout}).encode() + b"\n"
    with _LOCK:
        if _worker is None or _worker.poll() is not None:
            _worker = _start_worker()
        to_worker, from_worker = _pipes(_worker)
        try:
            to_worker.write(request)
            to_worker.flush()
            ready, _, _ = select.select([from_worker], [], [], timeout)
            reply = from_worker.readline() if ready else None
        except BrokenPipeError:
            reply = b""
        if reply:
            result = json.loads(reply)
            if "error" in result:
                raise RuntimeError(f"math-verify worker: {result['error']}")
            return result["equal"]
        _stop_worker()
        if reply is None:
            TIMEOUTS += 1
            if TIMEOUTS == 1:
                _note(f"took over {timeout:g}s (worker restarted)", completion_text)
        else:
            CRASHES += 1
            if CRASHES == 1:
                _note("ended its worker", completion_text)
        return False


def _note(what: str, completion_text: str) -> None:
    shown = completion_text if len(completion_text) <= 200 else completion_text[:200] + "..."
    print(
        f"math_verify_reward: checking {shown!r} {what}; scored 0.0 "
        "(later ones are counted in forge_async.tasks.math_answer, not printed)",
        flush=True,
    )


def _pipes(worker: subprocess.Popen[bytes]) -> tuple[IO[bytes], IO[bytes]]:
    """The worker's stdin and stdout: both pipes, as _start_worker opens them."""
    assert worker.stdin is not None and worker.stdout is not None
    return worker.stdin, worker.stdout


def _start_worker() -> subprocess.Popen[bytes]:
    """A worker that has imported math-verify (its start-up time is no check's)."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "forge_async.tasks.math_answer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    _, from_worker = _pipes(worker)
    ready, _, _ = select.select([from_worker], [], [], START_TIMEOUT_S)
    if not (ready and from_worker.readline() == b"ready\n"):
        worker.kill()
        worker.wait()
        raise RuntimeError(f"the math-verify worker did not start within {START_TIMEOUT_S:g}s (see its stderr)")
    return worker


@atexit.register
def _stop_worker() -> None:
    """Kill the worker, if any (at exit, and after a timeout, holding _LOCK)."""
    global _worker
    worker, _worker = _worker, None
    if worker is not None:
        worker.kill()
        worker.wait()
        for pipe in _pipes(worker):
            pipe.close()


def _serve() -> None:
    """The worker's loop: one JSON request a line on stdin, one JSON reply a line."""
    import logging

    import math_verify  # noqa: F401  (imported before "ready": start-up is no check's time)

    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever a library prints goes to stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's; it kills the worker
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "Timeout is disabled" on each call
    replies.write(b"ready\n")
    replies.flush()
    for line in sys.stdin.buffer:  # ends when the controller's end of the pipe closes
        request = json.loads(line)
        signal.alarm(math.ceil(request["timeout"]) + WORKER_GRACE_S)
        reply: dict[str, bool | str]
        try:
            reply = {"equal": bool(is_equivalent(request["gold"], request["text"]))}
        except Exception as err:
            reply = {"error": f"{type(err).__name__}: {err}"}
        signal.alarm(0)
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


if __name__ == "__main__":
    _serve()
