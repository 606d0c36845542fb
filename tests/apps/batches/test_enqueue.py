"""enqueue sends tasks by name: every name it sends is a registered task taking those args."""

from __future__ import annotations

import inspect

import pytest
from celery import current_app

from apps.batches import enqueue


@pytest.mark.parametrize(("send", "args"), [
    (enqueue.validate, (7,)), (enqueue.chunk, (7, 0, 3)), (enqueue.finalize, (7,)),
    (enqueue.chunk_later, (7, 0, 3, 30)),
])
def test_each_send_names_a_registered_task_that_takes_its_args(monkeypatch, send, args):
    import apps.batches.tasks  # noqa: F401 (registers the tasks, as a worker's autodiscovery)

    sent = []

    def send_task(name, args=(), kwargs=None, **options):
        sent.append((name, args, options))

    monkeypatch.setattr(current_app, "send_task", send_task)
    send(*args)
    [(name, sent_args, options)] = sent
    countdown = args[3:]  # chunk_later's countdown is an option of the message, not an arg
    args = args[:3] if countdown else args
    assert tuple(sent_args) == args and options["ignore_result"] is True
    assert options.get("countdown") == (countdown[0] if countdown else None)
    task = current_app.tasks[name]
    inspect.signature(task.run).bind(*sent_args)  # raises TypeError when the args do not fit
