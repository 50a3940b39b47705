"""Tests of reports/matrix_report/: the version matrix."""
