"""Adapters: one module per attention implementation under test (see ``kernels.contract.base``)."""
