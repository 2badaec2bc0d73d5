"""The fused attention kernel's known mistakes (lesson 12's exercise and lab 12's challenge share them): each
model returns the ``out`` the mistake produces, in float64 math, as q's dtype.

Most come from :func:`_flash_tiles`, the kernel's online softmax over key tiles written in NumPy with a learner's
mistakes as switches (a rescale left out, the running maximum reset or replaced by the tile's own, the division by
row_sum inside the loop); the others change the scores (the mask, the scale, the padding of the last tile).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..kernels._launch import ceil_div
from ..transformer.attention import attention_reference, causal_mask
from ..transformer.flash import BK, BQ

__all__ = ["FLASH_MISTAKES", "masked_scores"]


def masked_scores(q: np.ndarray, k: np.ndarray, scale: float, causal: bool, offset: bool = True) -> np.ndarray:
    """Scaled scores in float64, -inf where the causal mask hides a key (``offset=False``: the mask without the
    m - n offset, a mistake)."""
    s = (q.astype(np.float64) @ k.astype(np.float64).T) * scale
    if not causal:
        return s
    return np.where(causal_mask(*s.shape, offset=None if offset else 0), s, -np.inf)


def _float32_range(x: np.ndarray) -> np.ndarray:
    """``x`` with what float32 cannot hold (beyond 3.4e38) turned into +-inf, as a float32 product overflows."""
    return np.where(np.abs(x) > np.finfo(np.float32).max, np.copysign(np.inf, x), x)


def _flash_tiles(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: Any,
    causal: Any,
    *,
    rescale_sum: bool = True,
    rescale_acc: bool = True,
    own_max: bool = False,
    reset_max: bool = False,
    normalise_in_loop: bool = False,
    normalise_at_end: bool = True,
    all_tiles: bool = False,
) -> np.ndarray:
    """The fused kernel's online softmax, tile by tile (BK keys), in float64, with a learner's mistakes as switches.

    Per row: ``new = max(row_max, tile max)``; if ``new`` is finite (the row has seen a visible key), ``row_sum``
    and ``acc`` are multiplied by ``alpha = exp(row_max - new)`` (``rescale_sum`` / ``rescale_acc`` off: that one
    is not), the tile's ``p = exp(s - new)`` is added, and ``row_max = new``; at the end ``out = acc / row_sum``.
    ``own_max``: ``new`` is the tile's own maximum (no running maximum). ``reset_max``: ``row_max`` is reset to
    -inf at every tile, so ``alpha = 0``. ``normalise_in_loop``: ``acc /= row_sum`` after every tile;
    ``normalise_at_end=False``: ``out = acc``. Products overflow to inf past float32's largest value, as in the
    kernel (``own_max`` with the rescale: ``alpha > 1`` when a tile's maximum is below the last). A causal block
    visits the key tiles up to the last one its rows can see, as the lesson's kernel does (``all_tiles``: every
    tile); that matters only with ``normalise_in_loop``.
    """
    s = masked_scores(q, k, float(scale), bool(int(causal)))
    n, m = s.shape
    last_key = np.full(n, m - 1)
    if int(causal) and not all_tiles:  # per row: its block's last key, min(m - 1, the block's last row + m - n)
        last_key = np.minimum(m - 1, np.minimum((np.arange(n) // BQ + 1) * BQ, n) - 1 + (m - n))
    run_max = np.full(n, -np.inf)
    run_sum = np.zeros(n)
    acc = np.zeros((n, v.shape[1]))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for k0 in range(0, m, BK):
            tile = s[:, k0 : k0 + BK]
            old = np.full(n, -np.inf) if reset_max else run_max
            new = tile.max(axis=1) if own_max or reset_max else np.maximum(old, tile.max(axis=1))
            active = ~np.isneginf(new) & (k0 <= last_key)  # the kernel skips a row that has seen no visible key
            p = np.where(active[:, None], np.exp(tile - new[:, None]), 0.0)
            alpha = _float32_range(np.where(active, np.exp(old - new), 1.0))
            run_sum = _float32_range(run_sum * (alpha if rescale_sum else 1.0)) + p.sum(axis=1)
            pv = p @ v[k0 : k0 + BK].astype(np.float64)
            acc = _float32_range(acc * (alpha[:, None] if rescale_acc else 1.0)) + pv
            if normalise_in_loop:
                acc = np.where(active[:, None], acc / run_sum[:, None], acc)
            run_max = np.where(active, new, run_max)
        return (acc / run_sum[:, None] if normalise_at_end else acc).astype(q.dtype)


def _flash_no_rescale(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    """The online softmax without the alpha = exp(old max - new max) correction."""
    return _flash_tiles(q, k, v, scale, causal, rescale_sum=False, rescale_acc=False)


def _flash_unnormalised(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    s = masked_scores(q, k, float(scale), bool(int(causal)))
    return (np.exp(s - s.max(axis=1, keepdims=True)) @ v.astype(np.float64)).astype(q.dtype)


def _flash_unscaled(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    return attention_reference(q, k, v, causal=bool(int(causal)), scale=1.0).astype(q.dtype)


def _flash_no_offset(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    s = masked_scores(q, k, float(scale), bool(int(causal)), offset=False)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True) @ v.astype(np.float64)).astype(q.dtype)


def _flash_key_not_masked_at_own_position(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: Any, causal: Any
) -> np.ndarray:
    """Causal with ``key >= row + offset`` masked (one key too many): a query does not see its own position."""
    s = masked_scores(q, k, float(scale), False)
    if int(causal):
        s = np.where(causal_mask(*s.shape, strict=True), s, -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(s - s.max(axis=1, keepdims=True))
        return (p / p.sum(axis=1, keepdims=True) @ v.astype(np.float64)).astype(q.dtype)


def _flash_padding_not_masked(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: Any, causal: Any) -> np.ndarray:
    """The last key tile's padding (zeros past m) left unmasked: each padded key scores 0 and takes weight."""
    s = masked_scores(q, k, float(scale), bool(int(causal)))
    n, m = s.shape
    pad = ceil_div(m, BK) * BK - m
    if int(causal) or pad == 0:
        raise ValueError("no unmasked padding: causal masks it anyway, or m fills whole tiles")
    s = np.concatenate([s, np.zeros((n, pad))], axis=1)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    v_pad = np.concatenate([v.astype(np.float64), np.zeros((pad, v.shape[1]))])
    return (p / p.sum(axis=1, keepdims=True) @ v_pad).astype(q.dtype)


FLASH_MISTAKES: dict[str, Callable[..., Any]] = {  # an out, or a list of the outs a mistake can give
    "when the running maximum grows, multiply the running sum and the accumulator by "
    "alpha = exp(old max - new max) before adding the tile.": _flash_no_rescale,
    "the running sum must be rescaled too: row_sum * alpha, alpha = exp(old max - new max), before adding the "
    "tile's exp(s - new max) (the accumulator is).": lambda q, k, v, sc, c: _flash_tiles(
        q, k, v, sc, c, rescale_sum=False
    ),
    "the accumulator must be rescaled too: acc * alpha, alpha = exp(old max - new max), before adding the "
    "tile's p @ v (the running sum is).": lambda q, k, v, sc, c: _flash_tiles(q, k, v, sc, c, rescale_acc=False),
    "out is the attention over the last key tile alone: at every tile the running maximum is still -inf, so alpha "
    "= exp(-inf - new max) = 0 wipes out the tiles before. Either it starts again in every tile (row_max = -inf "
    "inside the loop over tiles?), or the new maximum is never kept (row_max is not set to the new maximum at the end "
    "of the tile's update). Set row_max = -inf, row_sum = 0 and acc = 0 once, before the loop, and carry all three "
    "from tile to tile.": (lambda q, k, v, sc, c: _flash_tiles(q, k, v, sc, c, reset_max=True)),
    "each tile's exp(s - tile max) is taken relative to that tile's own maximum, and the tiles are then added as if "
    "they shared one: keep a running row_max = max(row_max, tile max) across the tiles, subtract it in exp, and "
    "multiply row_sum and acc by alpha = exp(old max - new max) when it grows.": lambda q, k, v, sc, c: _flash_tiles(
        q, k, v, sc, c, rescale_sum=False, rescale_acc=False, own_max=True
    ),
    "new_max must be the running maximum, max(row_max, tile max), not the tile's own maximum: when a tile's "
    "maximum is below the one before, alpha = exp(old max - new max) is above 1 and overflows float32 once the gap "
    "passes 88.7 (inf, then inf / inf = nan). With the running maximum alpha <= 1 and every exp(s - row_max) <= 1.": (
        lambda q, k, v, sc, c: _flash_tiles(q, k, v, sc, c, own_max=True)
    ),
    "acc is divided by row_sum inside the loop over tiles, so the next tile adds its unnormalised p @ v to an "
    "already normalised acc: divide once, after the last tile (out = acc / row_sum).": lambda q, k, v, sc, c: [
        _flash_tiles(q, k, v, sc, c, normalise_in_loop=True, normalise_at_end=False, all_tiles=every)
        for every in (False, True)
    ],
    "acc is divided by row_sum twice, inside the loop over tiles and again at the end: divide once, after the "
    "last tile (out = acc / row_sum).": lambda q, k, v, sc, c: [
        _flash_tiles(q, k, v, sc, c, normalise_in_loop=True, all_tiles=every) for every in (False, True)
    ],
    "query i sees key i + (m - n) itself (its own position): mask key > i + (m - n), not >=. With >= the diagonal "
    "key is masked, and a row whose only visible key is that one (query 0 when m = n) has every key masked: "
    "row_sum = 0, so out = 0 / 0 = nan (and lse = row_max + log(0) = -inf).": _flash_key_not_masked_at_own_position,
    "keys past the end (the zeros loaded into the last tile when m is not a multiple of the tile) must be "
    "masked to -inf: a padded key scores 0 and would take weight.": _flash_padding_not_masked,
    "divide the accumulator by the running sum at the end (out = acc / row_sum).": _flash_unnormalised,
    "the scores are not scaled: multiply each dot product q . k by scale (1 / sqrt(d)) before the softmax.": (
        _flash_unscaled
    ),
    "with more keys than queries (m > n), query i sees keys up to i + (m - n), not i.": _flash_no_offset,
}
