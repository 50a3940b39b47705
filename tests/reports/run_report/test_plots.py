"""Plot data (pure) and the PNG files drawn from it."""

from __future__ import annotations

import dataclasses

from reports.run_report.plots import (
    MAX_RUN_PANELS,
    panel_subjects,
    plot_run,
    plot_versions,
    plot_versions_by_length,
    ratio_points,
    worst_per_length,
)
from tests.support.report_folders import metric, result, standard_results


def test_ratio_points_group_by_subject_and_dtype():
    points = ratio_points(standard_results())
    assert set(points) == {
        ("flash", "float32"),
        ("flash", "bfloat16"),
        ("xla", "float32"),
        ("xla", "bfloat16"),
    }
    lengths = [p[0] for p in points[("flash", "float32")]]
    assert lengths == sorted(lengths) and set(lengths) == {1, 7, 113, 128, 129, 1000}


def test_ratio_points_skip_unmeasured_and_non_finite_and_flag_failures():
    unmeasured = result("flash", "forward", "unsupported", ratio=None)
    nan = dataclasses.replace(result(), metrics=(metric(ratio=float("nan")),))
    failed = result("flash", "forward", "fail", length=129, ratio=9.0)
    points = ratio_points([unmeasured, nan, failed])
    assert points == {("flash", "float32"): [(129, 9.0, True)]}


def test_worst_per_length_is_the_envelope():
    assert worst_per_length([(128, 1.0, False), (128, 2.0, True), (7, 1.5, False)]) == [(7, 1.5), (128, 2.0)]


def test_no_data_no_plot(tmp_path):
    assert plot_run([result("gpu", "forward", "unavailable", ratio=None)], tmp_path / "x.png") is None
    assert not (tmp_path / "x.png").exists()
    assert plot_versions({"0.4.38": []}, tmp_path / "y.png") is None


def test_matrix_plots_are_pngs(tmp_path):
    runs = {"0.4.38": standard_results(), "0.10.2": standard_results(drift=1.2)}
    for draw, name in ((plot_versions, "v.png"), (plot_versions_by_length, "l.png")):
        path = draw(runs, tmp_path / name)
        assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000
    assert plot_run(standard_results(), tmp_path / "r.png").exists()


def test_tiny_ratios_are_drawn_at_the_floor():
    exact = result("flash", "forward", length=1, ratio=1e-9)
    assert ratio_points([exact]) == {("flash", "float32"): [(1, 1e-9, False)]}  # the data stays honest
    assert ratio_points([exact], floor=0.01) == {("flash", "float32"): [(1, 0.01, False)]}


def test_a_run_plot_draws_the_worst_subjects_first_and_at_most_a_screen_of_them():
    points = {(f"s{i:02}", "float32"): [(128, float(i), False)] for i in range(20)}
    points[("s00", "bfloat16")] = [(128, 0.5, True)]  # the lowest ratio, but a failure
    chosen = panel_subjects(points)
    assert len(chosen) == MAX_RUN_PANELS
    assert chosen[:3] == ["s00", "s19", "s18"]
    assert panel_subjects(points, limit=30) == ["s00", *(f"s{i:02}" for i in range(19, 0, -1))]
