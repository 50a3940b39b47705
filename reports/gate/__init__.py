"""The upgrade gate: a candidate run compared with a base run, and the calibration of its rules."""
