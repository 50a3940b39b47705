"""Tests of reports/records/: the results file, its lock, environment block, benchmarks.json, merging."""
