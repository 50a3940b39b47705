"""Tests of reports/run_report/: report.md and its parts."""
