"""Tests of run_records/: the results file, its lock, environment block, benchmarks.json, merging."""
