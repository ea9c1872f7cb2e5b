"""The audited library rows: structure, and the checker's verdict against the prediction.

The default run checks one row per library (small ``max_examples``:
the probes attribute the mechanisms, the fuzzer only confirms);
``EXCHANGE_FULL_AUDIT=1`` checks every row.
"""

from __future__ import annotations

import os

import pytest

from exchange.libraries import LIBRARIES, SUPPORTED, library_rows, unavailable_reason
from exchange.libraries.versions import DISTRIBUTIONS
from tests.extras import left_out

# One row per library with a mechanism to find (each check costs ~25 s of CPU).
QUICK = (
    ("trl:grpo", ()),
    ("verl:sapo/token-mean", ()),
    ("openrlhf:group_norm", ()),
    ("skyrl:regular", (("loss_reduction", "sequence_mean"),)),
    ("areal:ppo", (("reward_mean_level", "group"), ("reward_std_level", "group"))),
    ("art:cispo", ()),
)


def _key(row):
    return (row.target, tuple(sorted(row.params.items())))


def _row(request, key):
    library = key[0].split(":")[0]
    request.getfixturevalue(f"{library}_ready")
    rows = {_key(r): r for r in library_rows((library,))}
    assert key in rows, f"{key} is not an audited row"
    return rows[key]


def _assert_verdict(row, max_examples):
    from exchange.checker import check

    report = check(row.factory(), max_examples=max_examples, seed=0, name=row.name)
    for regime, want in row.expected.items():
        broken = {p for p in report.properties if not report.holds(p, regime)}
        assert broken == set(want.breaks), (row.name, regime, sorted(broken))
        assert set(report.mechanisms_in(regime)) == set(want.mechanisms), (row.name, regime, report.mechanisms_in(regime))


def test_rows_cover_every_installed_library_with_versions():
    rows = library_rows()
    for library in LIBRARIES:
        mine = [r for r in rows if r.library == library]
        if unavailable_reason(library) is None:
            assert len(mine) >= 6, library
            assert {r.version for r in mine} == {SUPPORTED[library]}
        elif os.environ.get("CI") == "true" and not left_out(DISTRIBUTIONS.get(library, library)):
            # A partial-extras run (EXCHANGE_EXTRAS, tests/extras.py) may leave it out.
            pytest.fail(f"CI=true but {unavailable_reason(library)}")
    assert len({r.name for r in rows}) == len(rows)
    verl_targets = {r.target for r in rows if r.library == "verl"}
    assert not verl_targets or len(verl_targets) >= 8  # >= 8 policy-loss/aggregation combinations
    for row in rows:
        assert set(row.expected) == {"on_policy", "off_policy"}


@pytest.mark.parametrize("key", QUICK, ids=lambda k: " ".join([k[0], *(f"{a}={b}" for a, b in k[1])]))
def test_checker_agrees_with_the_prediction(request, key):
    _assert_verdict(_row(request, key), max_examples=4)


# Every row's verdict against its prediction, all rows at once, is tests/test_audit.py:
# it regenerates docs/audit-libraries.md in CI, and each row must read '= metadata: yes'.
