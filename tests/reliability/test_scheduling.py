"""Two workers dead at once: the scheduler must not end the run (pytest-dev/pytest-xdist#20)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from xdist.scheduler import LoadScheduling

from conformance.harness.scheduling import CrashTolerantLoadScheduling, case_of, make_scheduler

TESTS = [f"test_{i}" for i in range(40)]  # enough that a lone survivor is sent more


class FakeConfig:
    def __init__(self, dist: str = "load"):
        self.values = {"tx": ["2*popen"], "dist": dist, "maxschedchunk": None}

    def getvalue(self, name):
        return self.values[name]

    getoption = getvalue


class FakeWorker:
    """A worker as the scheduler sees it: sends fail once its process is gone."""

    def __init__(self, name: str):
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.dead = False
        self.received: list[int] = []
        self.failed_sends = 0

    def send_runtest_some(self, indices):
        if self.dead:
            self.failed_sends += 1
            raise OSError("cannot send (already closed?)")
        self.received.extend(indices)

    def shutdown(self):
        self.shutting_down = True


def started(scheduling_class):
    sched = scheduling_class(FakeConfig())
    a, b = FakeWorker("gw0"), FakeWorker("gw1")
    for worker in (a, b):
        sched.add_node(worker)
        sched.add_node_collection(worker, TESTS)
    sched.schedule()
    return sched, a, b


def test_xdist_alone_ends_the_run_when_the_second_worker_is_already_gone():
    """The scenario is real: stock scheduling raises out of the first worker's node-down."""
    sched, a, b = started(LoadScheduling)
    a.dead = b.dead = True
    with pytest.raises(OSError, match="already closed"):
        sched.remove_node(a)


def test_both_crashes_are_reported_and_every_test_still_runs_once():
    sched, a, b = started(CrashTolerantLoadScheduling)
    running_on_a, running_on_b = a.received[0], b.received[0]
    a.dead = b.dead = True

    assert sched.remove_node(a) == TESTS[running_on_a]  # no OSError (b's queue is full: no send)
    assert sched.remove_node(b) == TESTS[running_on_b]  # what b ran, not a test it never got

    replacement = FakeWorker("gw2")
    sched.add_node(replacement)
    sched.add_node_collection(replacement, TESTS)
    sched.schedule()
    while sched.node2pending[replacement]:
        sched.mark_test_complete(replacement, sched.node2pending[replacement][0])
    crashed = {running_on_a, running_on_b}
    assert sorted(replacement.received) == sorted(set(range(len(TESTS))) - crashed)
    assert not sched.pending


def test_a_failed_send_keeps_the_queue_order():
    sched, a, b = started(CrashTolerantLoadScheduling)
    waiting = list(sched.pending)
    b.dead = True  # b reported a test done, then died: the report is handled after the death
    sched.mark_test_complete(b, b.received[0])
    assert b.failed_sends == 1  # its queue was refilled, and the send failed
    assert sched.pending == waiting  # the tests b never got are back at the front, in order
    assert sched.node2pending[b] == b.received[1:]  # nothing b never got is charged to b
    sched.remove_node(a)
    assert sched.pending == waiting + a.received[1:]  # as xdist would have queued them


@pytest.mark.parametrize("dist, expected", [("load", CrashTolerantLoadScheduling), ("loadscope", type(None))])
def test_only_load_scheduling_is_replaced(dist, expected):
    assert type(make_scheduler(FakeConfig(dist), None)) is expected


def run_to_the_end(tests: list[str], group_of=None) -> tuple[FakeWorker, FakeWorker]:
    sched = CrashTolerantLoadScheduling(FakeConfig(), None, group_of)
    a, b = FakeWorker("gw0"), FakeWorker("gw1")
    for worker in (a, b):
        sched.add_node(worker)
        sched.add_node_collection(worker, tests)
    sched.schedule()
    while sched.pending:
        for worker in (a, b):
            if sched.node2pending[worker]:
                sched.mark_test_complete(worker, sched.node2pending[worker][0])
    assert sorted(a.received + b.received) == list(range(len(tests)))
    return a, b


CASES = [f"conformance/test_checks.py::test_{check}[case{i}]" for i in range(12) for check in "abcde"]


@pytest.mark.parametrize(
    "group_of",
    # By case; by pairs of adjacent cases that share a compiled call ("[case7]" -> "3").
    [None, lambda nodeid: str(int(case_of(nodeid)[5:-1]) // 2)],
    ids=["by-case", "by-compile-group"],
)
def test_a_compile_group_is_sent_whole_so_it_compiles_on_one_worker(group_of):
    """Chunks end at a group's last check: a group split over two workers compiles twice."""
    group = group_of or case_of

    def groups(worker):
        return {group(CASES[i]) for i in worker.received}

    a, b = run_to_the_end(CASES, group_of)
    assert groups(a) and groups(b) and not groups(a) & groups(b)


MANY_CASES = [f"conformance/test_checks.py::test_{check}[case{i}]" for i in range(40) for check in "abcde"]


def test_a_worker_holds_two_whole_groups_so_neither_waits_on_the_others_queue():
    """xdist's own load sends a worker a quarter of all that is pending at once (50 of these 200
    tests, 10 groups), which the other worker cannot take over when it runs out."""
    sched = CrashTolerantLoadScheduling(FakeConfig(), None)
    a, b = FakeWorker("gw0"), FakeWorker("gw1")
    for worker in (a, b):
        sched.add_node(worker)
        sched.add_node_collection(worker, MANY_CASES)
    sched.schedule()
    fast_steps = 0
    while sched.pending or sched.node2pending[a] or sched.node2pending[b]:
        for worker in (a, b):
            queue = sched.node2pending[worker]
            assert len({case_of(MANY_CASES[i]) for i in queue}) <= 2
            assert len(queue) >= 2 or not sched.pending  # a worker runs a test once it knows the next
        # b runs four tests in the time a runs one (cheap compiles against dear ones)
        fast_steps += 1
        worker = a if fast_steps % 5 == 0 else b
        if not sched.node2pending[worker]:
            worker = a if worker is b else b
        sched.mark_test_complete(worker, sched.node2pending[worker][0])
    assert sorted(a.received + b.received) == list(range(len(MANY_CASES)))
    assert len(b.received) > 3 * len(a.received)  # the fast worker took the work as it came


def test_the_case_of_a_test_is_its_parameter_id():
    assert (
        case_of("conformance/test_checks.py::test_lse[tpu_flash-float32-full-B1]")
        == "[tpu_flash-float32-full-B1]"
    )
    assert case_of("tests/test_x.py::test_plain") == "tests/test_x.py::test_plain"
