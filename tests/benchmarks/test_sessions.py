"""`nox -s bench` picks JAX versions by the same rules as `nox -s conformance`."""

from __future__ import annotations

from benchmarks.sessions import bench_versions
from reports import jax_versions


def test_bare_bench_means_the_newest_version() -> None:
    assert bench_versions(["-s", "bench"], {}) == (jax_versions.NEWEST,)
    assert bench_versions([], {"NOXSESSION": "bench"}) == (jax_versions.NEWEST,)


def test_a_named_version_is_added_even_when_unlisted() -> None:
    versions = bench_versions(["-s", "bench(jax='0.4.99')"], {})
    assert "0.4.99" in versions
    assert bench_versions(["-s", "bench", "bench(jax='0.4.99')"], {}) == (jax_versions.NEWEST, "0.4.99")


def test_other_sessions_leave_the_whole_matrix() -> None:
    assert bench_versions(["-s", "conformance"], {}) == jax_versions.MATRIX
    assert bench_versions(["-s", "conformance(jax='0.4.99')"], {}) == jax_versions.MATRIX
    assert bench_versions(["-l"], {}) == jax_versions.MATRIX
    assert bench_versions(["-s", "benchmark_something"], {}) == jax_versions.MATRIX
