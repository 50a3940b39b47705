"""The correct control decides every feature of the table: it declares it, or says why not."""

from __future__ import annotations

import pytest

from kernels.contract import features
from kernels.contract.base import Capabilities
from tests.mutants import correct


@pytest.mark.parametrize("feature", features.FEATURES, ids=[f.name for f in features.FEATURES])
def test_the_correct_control_declares_each_feature_or_says_why_not(feature):
    declared, refused = feature.name in correct.DECLARED, feature.name in correct.NOT_DECLARED
    assert declared != refused, (
        f"decide {feature.name!r} for tests/mutants/correct.py: its value in DECLARED, "
        "or in NOT_DECLARED with the reason the correct control cannot do it"
    )
    if refused:
        assert correct.NOT_DECLARED[feature.name].strip(), feature.name
        assert not feature.declared(correct.FULL), f"FULL declares {feature.name} yet says why it cannot"
    else:
        assert feature.declared(correct.FULL), feature.name


def test_full_declares_exactly_what_the_table_says():
    names = {f.name for f in features.FEATURES}
    assert set(correct.DECLARED) | set(correct.NOT_DECLARED) == names
    plain = Capabilities(dtypes=correct.FULL.dtypes)
    for name, value in correct.DECLARED.items():
        attribute = features.BY_NAME[name].capability
        if attribute is not None:
            assert getattr(correct.FULL, attribute) == value != getattr(plain, attribute), name


def test_features_sharing_an_attribute_must_agree():
    with pytest.raises(ValueError, match="bias_fill declares bias=False"):
        correct.declared_capabilities({"bias": True, "bias_fill": False})
