"""The numba kernels behind the compiled path: single passes over the data, no temporaries of
its size. Imported only when the compiled path runs (numba compiles each signature once and
caches it next to this file).

Why numba and not torch ops: a threshold selection in torch is `abs` (a pass writing N floats),
`ge` (a pass writing N bools) and `nonzero` (a pass reading them): three passes and two
temporaries where one read suffices. Here every scan reads its input once, in chunks of 64: a
chunk's hit count is a vectorized integer sum (no branch per element), and only the rare chunks
with a hit are scanned again to write their indices.

Comparisons run in the input's dtype: callers pass a cut already rounded to it, so a float32
input is compared exactly as torch compares it. NaN is never >= a cut; where a kernel ranks
magnitudes (top-k) a NaN counts as +inf, as the torch path does.
"""
from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

CHUNK = 64  # elements per vectorized hit count: 256 bytes of float32, four cache lines

_jit = njit(cache=True, nogil=True, boundscheck=False)


@_jit
def count_at_least(values, cut):
    """How many |values[i]| >= cut."""
    total = 0
    for i in range(values.shape[0]):
        total += abs(values[i]) >= cut
    return total


@_jit
def select_at_least(values, cut, offset, out):
    """Writes i + offset for every |values[i]| >= cut into `out`, increasing, and returns how many
    there are. Stops writing (but keeps counting) when `out` is full: the caller grows it and
    calls again."""
    n = values.shape[0]
    capacity = out.shape[0]
    count = 0
    full = n - n % CHUNK
    for base in range(0, full, CHUNK):
        hits = 0
        for i in range(base, base + CHUNK):
            hits += abs(values[i]) >= cut
        if hits == 0:
            continue
        if count + CHUNK <= capacity:
            # Branch-free: write every index, advance only past hits. A branch per element
            # mispredicts when many elements hit (an unsettled threshold selects 30% of N).
            for i in range(base, base + CHUNK):
                out[count] = i + offset
                count += abs(values[i]) >= cut
            continue
        for i in range(base, base + CHUNK):
            if abs(values[i]) >= cut:
                if count < capacity:
                    out[count] = i + offset
                count += 1
    for i in range(full, n):
        if abs(values[i]) >= cut:
            if count < capacity:
                out[count] = i + offset
            count += 1
    return count


@_jit
def _magnitude(value):
    """|value| for ranking, NaN as +inf."""
    magnitude = abs(value)
    return np.inf if magnitude != magnitude else magnitude


@_jit
def sample_magnitudes(values, sample):
    """Fills `sample` with |values| at evenly spaced positions (NaN as +inf)."""
    n, m = values.shape[0], sample.shape[0]
    stride = n // m
    for j in range(m):
        sample[j] = _magnitude(values[j * stride + stride // 2])


@_jit
def gather_candidates(values, cut, positions, magnitudes):
    """Every i with |values[i]| > cut or NaN, in increasing order, with its magnitude (NaN as
    +inf), written while there is room; returns how many there are. Strictly above: a cut that
    ties with many elements (a sampled 0 in a mostly-zero vector) does not take them all in."""
    n = values.shape[0]
    capacity = positions.shape[0]
    count = 0
    full = n - n % CHUNK
    for base in range(0, full, CHUNK):
        hits = 0
        for i in range(base, base + CHUNK):
            hits += not (abs(values[i]) <= cut)  # true for NaN too
        if hits == 0:
            continue
        if count + CHUNK <= capacity:  # branch-free, as in select_at_least
            for i in range(base, base + CHUNK):
                positions[count] = i
                magnitudes[count] = _magnitude(values[i])
                count += not (abs(values[i]) <= cut)
            continue
        for i in range(base, base + CHUNK):
            if not (abs(values[i]) <= cut):
                if count < capacity:
                    positions[count] = i
                    magnitudes[count] = _magnitude(values[i])
                count += 1
    for i in range(full, n):
        if not (abs(values[i]) <= cut):
            if count < capacity:
                positions[count] = i
                magnitudes[count] = _magnitude(values[i])
            count += 1
    return count


@_jit
def top_of_candidates(positions, magnitudes, count, k, offset, out):
    """The k largest of the first `count` candidates, ties at the k-th magnitude broken by lower
    position; writes position + offset into out[:k], increasing. Candidates come in increasing
    position, so one pass in order both keeps and orders them."""
    kth = np.partition(magnitudes[:count].copy(), count - k)[count - k]
    above = 0
    for j in range(count):
        above += magnitudes[j] > kth
    ties = k - above  # how many of the candidates equal to kth are kept: the first ones
    written = 0
    for j in range(count):
        magnitude = magnitudes[j]
        if magnitude > kth or (magnitude == kth and ties > 0):
            if magnitude == kth:
                ties -= 1
            out[written] = positions[j] + offset
            written += 1


@_jit
def topk_at_cut(values, cut, k, offset, positions, magnitudes, out):
    """Gathers the candidates for `cut` and, when there are at least k and all fit in the
    buffers, writes the top-k into out[:k]. Returns the candidates' count either way: below k,
    the caller lowers the cut; above the buffers' size, it grows them and calls again."""
    count = gather_candidates(values, cut, positions, magnitudes)
    if k <= count <= positions.shape[0]:
        top_of_candidates(positions, magnitudes, count, k, offset, out)
    return count


@_jit
def kth_largest(sample, rank):
    """The rank-th largest (1-based) of `sample`."""
    m = sample.shape[0]
    return np.partition(sample.copy(), m - rank)[m - rank]


@_jit
def sorted_union(rows, counts, words, out):
    """The distinct values of rows[r, :counts[r]] for every r, increasing, into `out`; returns
    how many. `words` is a bitmap with a bit per possible value (zeroed here): marking is one
    pass over the selections and reading it one pass over the bitmap, with no sort."""
    words[:] = 0
    for r in range(rows.shape[0]):
        for j in range(counts[r]):
            value = rows[r, j]
            words[value >> 6] |= np.uint64(1) << np.uint64(value & 63)
    count = 0
    for w in range(words.shape[0]):
        bits = words[w]
        while bits != 0:
            out[count] = (w << 6) + trailing_zeros(bits)
            count += 1
            bits &= bits - np.uint64(1)
    return count
