"""The one event-key hash: a polynomial prefix hash with a parallel-prefix form.

Every per-token value of a checker case (behaviour probability, ratio, reference
probability, entropy) is a function of the token's *event* (THEORY.md section 1): the
key ``(g, tok_0, ..., tok_t)`` of group index and prefix up to the token. The checker
picks those values from small grids by a hash of ``(seed, salt, key)``. This module is
the only place that hash is written.

Definition (all arithmetic modulo ``2**64``; ``B`` odd, hence invertible)::

    x_0 = g + 1,  x_j = tok_{j-1} + 1                     (no item is 0)
    P_t = sum_{j=0}^{t+1} x_j * B**(t+1-j)                 (the prefix polynomial)
        = B**(t+1) * cumsum_j(x_j * B**(-j))                (its parallel-prefix form)
    key_hash(t) = mix(P_t + (t + 2) * LENGTH)               (mix: splitmix64's finaliser)
    pick(seed, salt, key_hash) = mix(key_hash ^ mix(seed * SEED + salt * SALT)) mod size

``mix`` is the finaliser of Steele, Lea and Flood's SplitMix64 (OOPSLA 2014), a
bijection of 64-bit words with full avalanche. Tensors are ``int64``; their two's
complement wrap-around *is* arithmetic modulo ``2**64``, and ``>>`` is made logical by
masking. tests/checker/test_event_hash.py checks every function against a plain Python
loop over unbounded integers (:func:`reference_key_hash`, :func:`reference_pick`).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

__all__ = ["key_hashes", "tuple_hashes", "pick", "reference_key_hash", "reference_pick"]

_MOD = 1 << 64
_MASK = _MOD - 1
BASE = 0x9E3779B97F4A7C15  # odd: 2**64 / golden ratio
LENGTH = 0xD6E8FEB86659FD93
SEED = 0xC2B2AE3D27D4EB4F
SALT = 0x165667B19E3779F9
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_BASE_INV = pow(BASE, -1, _MOD)


def _signed(x: int) -> int:
    """``x mod 2**64`` as the int64 with the same bits."""
    x &= _MASK
    return x - _MOD if x >> 63 else x


def _shr(z: Tensor, s: int) -> Tensor:
    """Logical right shift of int64 words."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def _mix_(z: Tensor) -> Tensor:
    """SplitMix64's finaliser on int64 words (elementwise), in place on ``z`` (a fresh
    tensor of the caller's): no new ``[M, K, N, T]`` tensor per step (the picks of a batch
    are its largest tensors)."""
    z ^= _shr(z, 30)
    z *= _signed(_MIX1)
    z ^= _shr(z, 27)
    z *= _signed(_MIX2)
    z ^= _shr(z, 31)
    return z


def _powers(base: int, n: int, device: torch.device) -> Tensor:
    """``[base**0, ..., base**(n-1)]`` modulo ``2**64``, int64 (``n >= 1``)."""
    steps = torch.full((n,), _signed(base), dtype=torch.long, device=device)
    steps[0] = 1
    return torch.cumprod(steps, 0)


@functools.lru_cache(maxsize=64)
def _tables(t: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """``(B**-j for j <= t [t+1], B**(t'+1) for t' < t [t], (t'+2) * LENGTH for t' < t [t])``
    for rows of ``t`` tokens: constants of the width, built once per width and device
    (a case's template is built for every layout; these are a third of its hash's ops).
    Read-only: callers never write into them."""
    down = _powers(_BASE_INV, t + 1, device)
    up = _powers(BASE, t + 1, device)[1:]
    length = torch.arange(2, t + 2, device=device, dtype=torch.long) * _signed(LENGTH)
    return down, up, length


def key_hashes(tokens: Tensor, group: Tensor, mask: Tensor) -> Tensor:
    """The hash of every token's event key, ``[N, T]`` int64 (0 on padding).

    Args:
        tokens: ``[N, T]`` token ids (>= 0; padding anything).
        group: ``[N]`` group index of each row (>= 0).
        mask: ``[N, T]`` real tokens, right-padded.

    One pass of tensor operations (the parallel-prefix form above), on the inputs' device.
    """
    n, t = tokens.shape
    device = tokens.device
    down, up, length = _tables(t, device)  # B**-j, B**(t+1), (t + 2) * LENGTH
    items = torch.cat([group.to(torch.long)[:, None] + 1, tokens.to(torch.long) + 1], dim=1)  # [N, T+1]
    prefix = torch.cumsum(items * down, dim=1)[:, 1:] * up  # P_t after each token, [N, T]
    hashed = _mix_(prefix + length)
    return torch.where(mask, hashed, torch.zeros((), dtype=torch.long, device=device))


def pick(key_hash: Tensor, seeds: Tensor | int, salt: int | Tensor, size: int | Tensor) -> Tensor:
    """Grid indices ``pick(seed, salt, key_hash) mod size``.

    ``key_hash``: int64 of any shape ``S``. ``seeds``: an int, or a 1-D tensor of ``K``
    seeds (adds a leading ``K`` axis). ``salt`` and ``size``: ints, or 1-D tensors of
    ``M`` salts and their grid sizes (adds a leading ``M`` axis before ``K``): one pass
    picks every value of every configuration."""
    device = key_hash.device
    seeds = torch.as_tensor(seeds, dtype=torch.long, device=device)
    salt = torch.as_tensor(salt, dtype=torch.long, device=device)
    size = torch.as_tensor(size, dtype=torch.long, device=device)
    seeds = seeds.reshape((1,) * salt.dim() + seeds.shape)
    salt = salt.reshape(salt.shape + (1,) * (seeds.dim() - salt.dim()))
    salted = _mix_(seeds * _signed(SEED) + salt * _signed(SALT))  # [M.., K..]
    salted = salted.reshape(salted.shape + (1,) * key_hash.dim())
    size = size.reshape(size.shape + (1,) * (salted.dim() - size.dim()))
    return _mix_(key_hash ^ salted).remainder_(size)  # [M.., K.., S]: every step in place


# ------------------------------------------- the plain definition (tests, docs, explicit keys)
def _mix_int(z: int) -> int:
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK
    return z ^ (z >> 31)


def reference_key_hash(key: tuple[int, ...]) -> int:
    """The definition, one item at a time over Python integers: ``P <- P * B + x``."""
    p = 0
    for x in (key[0] + 1, *(tok + 1 for tok in key[1:])):
        p = (p * BASE + x) & _MASK
    return _signed(_mix_int((p + len(key) * LENGTH) & _MASK))


def tuple_hashes(keys: list[tuple[int, ...]]) -> Tensor:
    """:func:`key_hashes` of explicit event keys ``(g, tok_0, ..., tok_t)``, ``[len(keys)]``:
    the definition itself (a case's few overridden events)."""
    return torch.tensor([reference_key_hash(k) for k in keys], dtype=torch.long)


def reference_pick(key: tuple[int, ...], seed: int, salt: int, size: int) -> int:
    salted = _mix_int((seed * SEED + salt * SALT) & _MASK)
    return _signed(_mix_int((reference_key_hash(key) & _MASK) ^ salted)) % size
