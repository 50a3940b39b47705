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
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScheduling


class CrashTolerantLoadScheduling(LoadScheduling):
    """``--dist load``, except that a send to a worker already dead is undone, not fatal."""

    def _send_tests(self, node: Any, num: int) -> None:
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


def make_scheduler(config: Any, log: Any) -> LoadScheduling | None:
    """Our scheduler for ``--dist load`` (what ``-n N`` means); xdist's own for any other mode."""
    if config.getvalue("dist") != "load":
        return None
    return CrashTolerantLoadScheduling(config, log)
