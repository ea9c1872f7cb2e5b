"""Batch files: one :class:`~exchange.core.rollout.Rollout` written to and read from a file.

``exchange inspect BATCH TARGET`` reads one; ``ExchangeGRPOTrainer(dump_batches=...)``
(TRL) and :func:`exchange.libraries.verl.dump.dump_batch` (verl) write them with
:func:`save_batch`.

**Format.** A ``torch.save`` file (``.pt``, any suffix but ``.safetensors``) or a
safetensors file (``.safetensors``) holding a flat mapping ``{field: tensor}`` whose keys
are :class:`Rollout` constructor fields (:data:`BATCH_FIELDS`, taken from the dataclass):

- required: ``tokens [N,T]`` (integer), ``mask [N,T]`` (bool, a prefix of each row),
  ``rewards [N]``, ``group [N]`` (integer), ``old_logprobs [N,T]``;
- optional: ``ref_logprobs [N,T]``, ``entropy [N,T]``, ``logprobs [N,T]`` (the current
  policy; ``exchange inspect`` defaults to ``old_logprobs``, on-policy),
  ``baseline_rewards [N]``, ``advantages [N]`` or ``[N,T]`` (precomputed, e.g. verl's),
  ``truncated [N]`` (bool), ``prompt_tokens [N,P]`` (integer),
  ``prompt_mask [N,P]`` (bool) and ``sampling_logprobs [N,T]`` (the sampler's, e.g.
  vLLM's, log-probs; NaN where it could not score a token).

Each tensor is read back as its field's :data:`~exchange.core.rollout.FIELD_DTYPES`
(integers as ``long``, booleans as ``bool``, floats as ``float64``) on the CPU; the
:class:`Rollout` constructor then validates shapes and values.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from exchange.core.rollout import FIELD_DTYPES, Rollout
from exchange.errors import InvalidArgument

__all__ = ["BATCH_FIELDS", "REQUIRED_FIELDS", "save_batch", "load_batch"]

BATCH_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Rollout) if f.init)
"""Every field a batch file may hold: the :class:`Rollout` constructor fields, in order."""

REQUIRED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Rollout)
    if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)
"""The fields a batch file must hold: those :class:`Rollout` requires."""

_SAFETENSORS = ".safetensors"


def save_batch(rollout: Rollout, path: str | Path) -> Path:
    """Write every field of ``rollout`` that is not ``None`` to ``path`` (``.safetensors``
    via safetensors, any other suffix via ``torch.save`` of a ``{field: tensor}`` dict),
    detached and on the CPU; :func:`load_batch` reads it back. Returns ``path``."""
    path = Path(path)
    data = {
        name: getattr(rollout, name).detach().cpu().contiguous()
        for name in BATCH_FIELDS
        if getattr(rollout, name) is not None
    }
    if path.suffix == _SAFETENSORS:
        from safetensors.torch import save_file

        save_file(data, str(path))
    else:
        torch.save(data, path)
    return path


def load_batch(path: str | Path) -> Rollout:
    """Read a batch file (the format is in this module's docstring) into a :class:`Rollout`.

    Raises :class:`~exchange.errors.InvalidArgument` naming the file and the fix when it
    does not exist, does not hold a mapping of tensors, lacks a required field or holds
    a field :class:`Rollout` does not have; the constructor's
    :class:`~exchange.errors.RolloutError` when a field's shape or values are wrong.
    """
    path = Path(path)
    if not path.exists():
        raise InvalidArgument(f"batch file {path} does not exist; write one with exchange.core.batch_io.save_batch")
    # A file the reader cannot parse is the user's input, not a bug: name it and the format.
    try:
        if path.suffix == _SAFETENSORS:
            from safetensors.torch import load_file

            data = load_file(str(path))
        else:
            data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch's UnpicklingError, RuntimeError, safetensors' SafetensorError
        raise InvalidArgument(
            f"batch file {path}: cannot be read ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); "
            "write it with exchange.core.batch_io.save_batch (.pt: torch.save of a dict of tensors; "
            ".safetensors: safetensors.torch.save_file)"
        ) from err
    if not isinstance(data, dict):
        raise InvalidArgument(
            f"batch file {path}: holds a {type(data).__name__}, not a dict of tensors; "
            f"save {{field: tensor}} with fields from {list(BATCH_FIELDS)}"
        )
    missing = [name for name in REQUIRED_FIELDS if name not in data]
    if missing:
        raise InvalidArgument(
            f"batch file {path}: missing field(s) {missing}; a batch needs {list(REQUIRED_FIELDS)} "
            "(see exchange.core.batch_io)"
        )
    unknown = sorted(str(name) for name in set(data) - set(BATCH_FIELDS))
    if unknown:
        raise InvalidArgument(
            f"batch file {path}: unknown field(s) {unknown}; rename or drop them (Rollout fields: {list(BATCH_FIELDS)})"
        )
    kwargs = {}
    for name in BATCH_FIELDS:
        if name not in data:
            continue
        value = data[name]
        if not isinstance(value, torch.Tensor):
            raise InvalidArgument(
                f"batch file {path}: field {name}={type(value).__name__} is not a tensor; save it as a torch.Tensor"
            )
        kwargs[name] = value.to(FIELD_DTYPES[name])
    return Rollout(**kwargs)
