"""Batch files: every Rollout field round-trips, and a bad file names what is wrong."""

import dataclasses

import pytest
import torch

from exchange.core.batch_io import BATCH_FIELDS, REQUIRED_FIELDS, load_batch, save_batch
from exchange.core.rollout import FIELD_DTYPES, Rollout
from exchange.errors import InvalidArgument

INIT_FIELDS = tuple(f.name for f in dataclasses.fields(Rollout) if f.init)


def _full_rollout() -> Rollout:
    """A rollout with every constructor field set (float fields in float32, integers in
    int32: the file keeps them, loading casts to FIELD_DTYPES)."""
    gen = torch.Generator().manual_seed(0)
    n, t, p = 4, 5, 3
    lengths = torch.tensor([5, 3, 4, 2])
    mask = torch.arange(t)[None] < lengths[:, None]
    lp = lambda: torch.where(mask, -torch.rand(n, t, generator=gen), 0.0)  # noqa: E731
    return Rollout(
        tokens=torch.where(mask, torch.randint(1, 9, (n, t), generator=gen), 0).int(),
        mask=mask,
        rewards=torch.tensor([1.0, 0.0, 0.5, 0.25]),
        group=torch.tensor([3, 3, 7, 7], dtype=torch.int32),
        old_logprobs=lp(),
        ref_logprobs=lp(),
        entropy=torch.where(mask, torch.rand(n, t, generator=gen), 0.0),
        logprobs=lp(),
        baseline_rewards=torch.tensor([0.1, 0.2, 0.3, 0.4]),
        advantages=torch.tensor([0.5, -0.5, 0.25, -0.25]),
        truncated=torch.tensor([True, False, False, True]),
        prompt_tokens=torch.randint(1, 9, (n, p), generator=gen),
        prompt_mask=torch.tensor([[0, 1, 1]] * n, dtype=torch.bool),
        sampling_logprobs=lp(),
    )


def test_batch_fields_are_the_rollout_fields():
    assert BATCH_FIELDS == INIT_FIELDS == tuple(FIELD_DTYPES)
    assert REQUIRED_FIELDS == ("tokens", "mask", "rewards", "group", "old_logprobs")


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_every_rollout_field_round_trips(tmp_path, suffix):
    if suffix == ".safetensors":
        pytest.importorskip("safetensors")
    r = _full_rollout()
    assert all(getattr(r, name) is not None for name in INIT_FIELDS)  # the test covers every field
    back = load_batch(save_batch(r, tmp_path / f"batch{suffix}"))
    for name in INIT_FIELDS:
        got, want = getattr(back, name), getattr(r, name)
        assert got.dtype == FIELD_DTYPES[name], name
        assert torch.equal(got, want.to(FIELD_DTYPES[name])), name


def test_optional_fields_stay_absent(tmp_path):
    r = _full_rollout()
    minimal = Rollout(**{name: getattr(r, name) for name in REQUIRED_FIELDS})
    back = load_batch(save_batch(minimal, tmp_path / "b.pt"))
    for name in INIT_FIELDS:
        assert (getattr(back, name) is None) == (name not in REQUIRED_FIELDS), name


def _data():
    r = _full_rollout()
    return {name: getattr(r, name) for name in REQUIRED_FIELDS}


@pytest.mark.parametrize("name", REQUIRED_FIELDS)
def test_a_missing_field_is_named(tmp_path, name):
    data = _data()
    del data[name]
    torch.save(data, tmp_path / "b.pt")
    with pytest.raises(InvalidArgument, match=rf"b\.pt: missing field\(s\) \['{name}'\]; a batch needs"):
        load_batch(tmp_path / "b.pt")


def test_an_unknown_field_is_named_with_the_known_ones(tmp_path):
    torch.save({**_data(), "advantage": torch.zeros(4)}, tmp_path / "b.pt")
    with pytest.raises(InvalidArgument, match=r"unknown field\(s\) \['advantage'\]; rename or drop them") as err:
        load_batch(tmp_path / "b.pt")
    assert all(name in str(err.value) for name in INIT_FIELDS)


def test_not_a_dict_not_a_tensor_and_no_file(tmp_path):
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(InvalidArgument, match="holds a list, not a dict of tensors"):
        load_batch(tmp_path / "list.pt")
    torch.save({**_data(), "rewards": [1.0, 0.0, 0.5, 0.25]}, tmp_path / "b.pt")
    with pytest.raises(InvalidArgument, match="field rewards=list is not a tensor"):
        load_batch(tmp_path / "b.pt")
    with pytest.raises(InvalidArgument, match="does not exist"):
        load_batch(tmp_path / "nope.pt")


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_a_file_that_cannot_be_read_is_an_input_error(tmp_path, suffix):
    """A corrupt file is the user's input (exit 2 at the CLI), not a bug in exchange."""
    path = tmp_path / f"corrupt{suffix}"
    path.write_bytes(b"not a batch file at all")
    with pytest.raises(InvalidArgument, match=rf"batch file .*corrupt\{suffix}: cannot be read"):
        load_batch(path)
