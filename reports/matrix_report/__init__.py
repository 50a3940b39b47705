"""The version matrix: one report over every reports/jax-*/ folder (written to reports/matrix/)."""
