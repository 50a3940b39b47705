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

And it keeps each worker's queue short: at most ``QUEUED_GROUPS`` whole compile groups (and at
least two tests, since a worker runs a test only once it knows the next one). xdist's ``load``
hands a worker up to a quarter of everything pending in one send, and nothing takes those tests
back: when the other worker runs out of work, it stops while they wait. In a cold ``--impl all`` at
ci one worker stopped 148 s before the other (its compiles had been cheaper), a quarter of the
run's wall time on one of two cores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xdist.scheduler import LoadScheduling

QUEUED_GROUPS = 2  # whole compile groups a worker holds: the one it runs, and the next


class CrashTolerantLoadScheduling(LoadScheduling):
    """``--dist load``, except that a send to a worker already dead is undone, not fatal, that
    each send ends at a compile group's last test (``group_of``: node id -> group), and that a
    worker holds at most ``QUEUED_GROUPS`` groups."""

    def __init__(self, config: Any, log: Any = None, group_of: Callable[[str], str] | None = None):
        super().__init__(config, log)
        self.group_of = group_of or case_of

    def _send_tests(self, node: Any, num: int) -> None:
        num = self._filling(node) if num > 0 else 0
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

    def _filling(self, node: Any) -> int:
        """How many pending tests, whole groups, fill ``node``'s queue to ``QUEUED_GROUPS`` groups
        and at least two tests; 0 when it holds that much already."""
        queued = self.node2pending[node]
        groups = len({self.group_of(self.collection[i]) for i in queued})
        num = 0
        while num < len(self.pending) and (groups < QUEUED_GROUPS or len(queued) + num < 2):
            num = self._through_case_end(num + 1)
            groups += 1
        return num

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
