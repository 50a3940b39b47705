"""The isolation defaults of a conformance run, and how a user's own options override them."""

from __future__ import annotations

import pytest

from conformance.harness.isolation import parse_size
from conformance.suite import launch
from conformance.suite.launch import isolated_args


def test_defaults_isolate_every_run(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(launch, "usable_cores", lambda: 2)
    assert isolated_args(["--impl", "xla"]) == [
        "-n",
        "2",
        "--max-worker-restart",
        "200",
        "--timeout",
        "600",
        "--impl",
        "xla",
    ]


@pytest.mark.parametrize(
    "given, absent",
    [
        (["-n", "2"], "-n"),
        (["-n0"], "-n"),
        (["--numprocesses=4"], "-n"),
        (["--max-worker-restart", "3"], "--max-worker-restart"),
        (["--timeout=30"], "--timeout"),
    ],
)
def test_the_users_own_values_win(given, absent):
    args = isolated_args(given)
    assert args.count(absent) == (1 if absent in given else 0) and args[-len(given) :] == given


@pytest.mark.parametrize("cores, workers", [(1, 1), (2, 2), (64, launch.MAX_WORKERS)])
def test_one_worker_per_usable_core(monkeypatch: pytest.MonkeyPatch, cores: int, workers: int):
    monkeypatch.setattr(launch, "usable_cores", lambda: cores)
    args = isolated_args([])
    assert args[args.index("-n") + 1] == str(workers)


def test_no_xdist_means_no_workers_but_still_a_timeout():
    args = isolated_args(["-p", "no:xdist"])
    assert "-n" not in args and "--max-worker-restart" not in args and "--timeout" in args


@pytest.mark.parametrize("profile, seconds", [("ci", "600"), ("dev", "900"), ("thorough", "3600")])
def test_the_timeout_fits_the_profile(profile, seconds):
    args = isolated_args(["--profile", profile])
    assert args[args.index("--timeout") + 1] == seconds


@pytest.mark.parametrize("text, size", [("8G", 8 << 30), ("8GiB", 8 << 30), ("512m", 512 << 20), ("0", 0)])
def test_memory_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "-1G", "nan", "inf", ""])
def test_a_bad_memory_size_is_a_usage_error(text):
    with pytest.raises(pytest.UsageError, match="is not a size; write e.g. 8G"):
        parse_size(text)
