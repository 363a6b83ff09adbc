"""Perceptual image hashes, bit for bit those of ``imagededup`` 0.3 that Data-Juicer 1.6.1's
``image_deduplicator`` uses, in numpy (no scipy, no PyWavelets).

Every method maps an RGB image to 64 bits, written as 16 lowercase hex digits (bits packed row
by row, most significant first).  The image is first shrunk with Pillow's LANCZOS filter *in RGB*,
then converted to 8-bit grayscale (``convert("L")``): that order, not grayscale first, is
imagededup's, and it changes the pixels.  Per method, the thumbnail (width x height) and the bits:

* ``ahash`` (8 x 8): pixel >= the mean of the 64 pixels.
* ``dhash`` (9 x 8): pixel > its left neighbour, per row (8 comparisons of 9 columns).
* ``phash`` (32 x 32): the unnormalised DCT-II (``scipy.fftpack.dct``'s, twice: columns then rows)
  of the pixels, its top-left 8 x 8 block, bit = coefficient >= the median of the 63 coefficients
  other than the DC one.  The DCT here is a matrix product; it differs from scipy's FFT-based one
  only by rounding, except that scipy's gives exactly 0.0 where the true value is 0 (flat images,
  mirror-symmetric ones) while a matrix product gives noise of either sign.  Coefficients within
  ``_DCT_ZERO`` of 0 are therefore set to 0.0 -- true non-zero coefficients of 8-bit pixels are
  many orders of magnitude larger -- which makes flat and symmetric images hash as imagededup's do.
  The product is summed by numpy's elementwise multiply and add in one fixed order (``_dct_8x8``),
  never by BLAS: a BLAS product's rounding may depend on its thread count, its kernel for the shape
  and so on how many images were stacked with this one, and a partition's images are stacked
  differently in a Ray task, a local pool's process or this one (each remembers the hashes it has
  computed), so an image's bits must not depend on them (invariant 2, docs/resume.md).
* ``whash`` (256 x 256): pixels / 255, a 5-level 2-D Haar wavelet decomposition (PyWavelets'
  ``wavedec2``, ``symmetric`` mode: for a power-of-two size no edge extension is involved), its
  8 x 8 approximation, bit = coefficient >= their median.  Each level computes, like PyWavelets,
  ``h * x[2i + 1] + h * x[2i]`` with ``h = sqrt(1/2)``, first down the columns then along the rows,
  so the coefficients are the same floats.

``tests/conformance/image_hash`` holds imagededup's own hashes of real images and derived
near-duplicates; the tests compare every method bit for bit.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Iterable

import numpy as np

if TYPE_CHECKING:
    from PIL import Image as PILImage

#: The methods, as Data-Juicer's ``method`` argument names them.
METHODS = ("phash", "dhash", "whash", "ahash")

#: (width, height) of each method's grayscale thumbnail.
THUMBNAIL_SIZE = {"phash": (32, 32), "dhash": (9, 8), "whash": (256, 256), "ahash": (8, 8)}

#: |DCT coefficient| below which it is the exact 0 scipy's DCT gives (see the module docstring).
_DCT_ZERO = 1e-6
_HAAR = np.sqrt(0.5)  # PyWavelets' Haar filter taps, the same double
_WAVELET_LEVELS = 5


def thumbnail(img: PILImage.Image, method: str) -> np.ndarray:
    """``img`` (RGB) shrunk to ``method``'s thumbnail with LANCZOS, then grayscale: (height, width) uint8."""
    from airflow_provider_dj.ops.kernels.images import pil

    resample = pil().Resampling.LANCZOS
    return np.asarray(img.resize(THUMBNAIL_SIZE[method], resample).convert("L"), dtype=np.uint8)


@functools.lru_cache(maxsize=4)
def _dct_matrix(n: int) -> np.ndarray:
    """``M`` with ``M @ x`` the unnormalised DCT-II of ``x`` along axis 0: ``2 cos(pi k (2j + 1) / 2n)``."""
    k = np.arange(n, dtype=np.float64)[:, None]
    j = np.arange(n, dtype=np.float64)[None, :]
    return 2.0 * np.cos(np.pi * k * (2.0 * j + 1.0) / (2.0 * n))


def _ahash(thumbs: np.ndarray) -> np.ndarray:
    mean = thumbs.reshape(len(thumbs), -1).mean(axis=1)
    return thumbs >= mean[:, None, None]


def _dhash(thumbs: np.ndarray) -> np.ndarray:
    return thumbs[:, :, 1:] > thumbs[:, :, :-1]


def _dct_8x8(thumbs: np.ndarray) -> np.ndarray:
    """The top-left 8 x 8 block of each (n, N, N) thumbnail's 2-D DCT-II: ``M x M^T`` with ``M`` the first
    8 rows of the DCT matrix (only those coefficients are kept).  Each coefficient is summed in the same
    order whatever the thumbnails stacked with it and the machine's threads: over the rows ``i`` in
    ascending order, then over the columns ``j``, each term one correctly rounded product and sum (numpy's
    elementwise ``*`` and ``+``; see the module docstring for why not a BLAS product)."""
    n = thumbs.shape[1]
    m = _dct_matrix(n)[:8]
    x = thumbs.astype(np.float64)
    cols = np.zeros((len(x), 8, n))  # cols[:, k, j] = sum over i of m[k, i] * x[:, i, j]
    for i in range(n):
        cols += m[:, i, None] * x[:, None, i, :]
    coef = np.zeros((len(x), 8, 8))  # coef[:, k, l] = sum over j of cols[:, k, j] * m[l, j]
    for j in range(n):
        coef += cols[:, :, j, None] * m[:, j]
    return coef


def _phash(thumbs: np.ndarray) -> np.ndarray:
    coef = _dct_8x8(thumbs)
    coef[np.abs(coef) < _DCT_ZERO] = 0.0
    flat = coef.reshape(len(coef), 64)
    median = np.median(flat[:, 1:], axis=1)
    return coef >= median[:, None, None]


def _whash(thumbs: np.ndarray) -> np.ndarray:
    x = thumbs / 255
    for _ in range(_WAVELET_LEVELS):
        x = x[:, 1::2, :] * _HAAR + x[:, 0::2, :] * _HAAR
        x = x[:, :, 1::2] * _HAAR + x[:, :, 0::2] * _HAAR
    median = np.median(x.reshape(len(x), -1), axis=1)
    return x >= median[:, None, None]


_BITS = {"ahash": _ahash, "dhash": _dhash, "phash": _phash, "whash": _whash}


def hash_bits(thumbs: np.ndarray, method: str) -> np.ndarray:
    """The (n, 8, 8) bits of ``n`` stacked thumbnails of ``method`` (``thumbnail``'s, shape (n, h, w))."""
    if method not in _BITS:
        raise ValueError(f"unknown image hash method {method!r}; one of {', '.join(METHODS)}")
    thumbs = np.asarray(thumbs, dtype=np.uint8)
    if len(thumbs) == 0:
        return np.zeros((0, 8, 8), dtype=bool)
    return _BITS[method](thumbs)


def hex_hashes(bits: np.ndarray) -> list[str]:
    """Each (8, 8) bit matrix as imagededup writes it: 16 hex digits, rows first, MSB first."""
    packed = np.packbits(np.asarray(bits, dtype=bool).reshape(len(bits), 64), axis=1)
    return [row.tobytes().hex() for row in packed]


def image_hashes(images: Iterable[PILImage.Image], method: str = "phash") -> list[str]:
    """The ``method`` hash of each RGB image, in order."""
    if method not in THUMBNAIL_SIZE:
        raise ValueError(f"unknown image hash method {method!r}; one of {', '.join(METHODS)}")
    w, h = THUMBNAIL_SIZE[method]
    thumbs = [thumbnail(img, method) for img in images]
    stacked = np.stack(thumbs) if thumbs else np.zeros((0, h, w), dtype=np.uint8)
    return hex_hashes(hash_bits(stacked, method))
