"""The end of a run: a Monarch shutdown that does not finish is noted, not waited for."""

import monarch.actor
import pytest
from monarch._rust_bindings.monarch_hyperactor.pytokio import PythonTask
from monarch.actor import Future

from forge_async.mesh.procs import shut_down_monarch

pytestmark = pytest.mark.unit


def test_a_shutdown_that_outlasts_its_time_is_noted_and_not_waited_for(monkeypatch, capsys):
    async def a_proc_that_ignores_its_stop() -> None:
        await PythonTask.sleep(3600)

    monkeypatch.setattr(monarch.actor, "shutdown_context", lambda: Future(coro=a_proc_that_ignores_its_stop()))
    shut_down_monarch(timeout_s=0.5)
    assert "Monarch's shutdown did not finish within 0.5 s" in capsys.readouterr().err
