"""One run's report.md: the feature grid, root causes, cases in words, pairwise and fidelity tables, plots."""
