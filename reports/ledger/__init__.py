"""The known-issue ledger's jax ranges: the release sweep behind them and a bisection's edit of one."""
