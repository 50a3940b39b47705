"""xdist's ``load`` scheduling, made to survive two workers dying at once.

When a worker dies, xdist's controller handles its "node down" event by handing the dead
worker's pending tests to the others (``LoadScheduling.remove_node`` → ``check_schedule``).
If another worker died in the meantime, and its own "node down" is still queued, the send
to it raises ``OSError: cannot send (already closed?)``. That escapes as an INTERNALERROR
and ends the whole run with nothing recorded after it (pytest-dev/pytest-xdist#20, open
since 2016). Our controller makes this likely: it reruns a crashed check in a fresh process
inside the crash hook, seconds during which a second faulty case can kill the other worker.

``CrashTolerantLoadScheduling`` puts tests it could not send back at the head of the queue.
The dead worker's own "node down" event then reports the test it was really running, and
its replacement or the other workers take the rest.

It also sends each compile group whole. The run orders the checks of cases that share a
compiled call side by side (``plugin``'s collection order), because the first check compiles the
subject's call and the others reuse it. xdist's chunks cut that order anywhere, and near the end
of a run it sends one or two tests at a time, so a group split over two workers is compiled
twice: 36 of 202 compiles of the main job cold (-n 2), measured with JAX's compile events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xdist.scheduler import LoadScheduling


class CrashTolerantLoadScheduling(LoadScheduling):
    """``--dist load``, except that a send to a worker already dead is undone, not fatal, and
    that each send ends at a compile group's last test (``group_of``: node id -> group)."""

    def __init__(self, config: Any, log: Any = None, group_of: Callable[[str], str] | None = None):
        super().__init__(config, log)
        self.group_of = group_of or case_of

    def _send_tests(self, node: Any, num: int) -> None:
        num = self._through_case_end(num)
        tests = self.pending[:num]
        if not tests:
            return
        del self.pending[:num]
        self.node2pending[node].extend(tests)
        try:
            node.send_runtest_some(tests)
        except OSError:
            # Never reached the worker: not its crash item (that is its first pending test,
            # which it was running), so they go back to the front, in order, for the others.
            del self.node2pending[node][-len(tests) :]
            self.pending[:0] = tests

    def _through_case_end(self, num: int) -> int:
        """``num``, grown so that the last test sent is its group's last pending one."""
        if num <= 0 or num >= len(self.pending):
            return num
        last = self.group_of(self.collection[self.pending[num - 1]])
        while num < len(self.pending) and self.group_of(self.collection[self.pending[num]]) == last:
            num += 1
        return num


def make_scheduler(
    config: Any, log: Any, group_of: Callable[[str], str] | None = None
) -> LoadScheduling | None:
    """Our scheduler for ``--dist load`` (what ``-n N`` means); xdist's own for any other mode.
    ``group_of``: the compile group of a node id (default: its case, ``case_of``)."""
    if config.getvalue("dist") != "load":
        return None
    return CrashTolerantLoadScheduling(config, log, group_of)


def case_of(nodeid: str) -> str:
    """The case a test judges: its parameter id (``test_forward[<case id>]``); a test without
    one is a case of its own. The fallback group where the plan is not at hand."""
    start = nodeid.find("[")
    return nodeid[start:] if start >= 0 else nodeid
