"""Judging: inputs, the float64 reference's artifacts, tolerance, and the check functions."""
