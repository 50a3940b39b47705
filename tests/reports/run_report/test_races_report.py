"""The races check in report.md: its own grid row, label and failure section, from the registry."""

from __future__ import annotations

from reports.run_report.render import write_report
from tests.support.report_folders import result, standard_results, write_run

RACE = (
    "forward of flash (2 simulated cores): 1 data race(s) detected by TPU interpret mode:\n"
    "  write of ('hbm', 104, 0, 0)[0:8, 0:128] from 0, 0, pallas_call / write of ('hbm', 104, 0, 0)"
    "[0:8, 0:128] from 0, 1, pallas_call"
)


def test_a_race_renders_as_its_own_row_and_finding(tmp_path):
    results = [
        *standard_results(),
        result("flash", "races", "fail", ratio=None, reason=RACE, features=("races", "float32")),
        result(
            "xla",
            "races",
            "unsupported",
            ratio=None,
            reason="no race detector",
            features=("races", "float32"),
        ),
    ]
    folder = write_run(tmp_path / "jax-0.10.2", results)
    text = write_report(folder, plots=False).read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| no data races (TPU interpret)"))
    cells = [c.strip() for c in row.strip().strip("|").split("|")][1:]
    assert cells[0].startswith("❌") and cells[2] == "➖"  # flash fails; xla cannot be observed
    assert "races fails in float32" in text and "1 data race(s) detected by TPU interpret mode" in text
