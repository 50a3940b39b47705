"""Deliberately wrong attention implementations (mutants) and correct controls.

Each mutant is a plain function with the canonical plug-in signature
(``kernels/adapters/function_adapter.py``) and honest ``attention_capabilities``, reached as
``--impl tests.mutants.<module>:<function>``; the backward mutant is an adapter
class (plain functions are forward-only). ``catalogue.MUTANTS`` lists every mutant
with the check meant to reject it; ``tests/test_mutation.py`` proves that it does.
"""
