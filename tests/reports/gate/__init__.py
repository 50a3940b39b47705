"""Tests of reports/gate/: the upgrade gate, its rules, thresholds and calibration mutant."""
