"""Hyperparameters are validated by meaning, naming the allowed range (issue 17)."""

import pytest

from exchange import objectives
from exchange.errors import InvalidArgument


@pytest.mark.parametrize(
    "params,words",
    [({"eps_high": "-5"}, "(0, inf)"), ({"eps_high": "nan"}, "not finite"), ({"eps_low": "2"}, "(0, 1)"), ({"eps_low": 0.0}, "(0, 1)")],
)
def test_out_of_range_parameters_name_the_range(params, words):
    with pytest.raises(InvalidArgument) as info:
        objectives.resolve("dapo", **params)
    assert words in str(info.value)


def test_in_range_parameters_are_accepted():
    objectives.resolve("dapo", eps_low="0.1", eps_high="0.3")
