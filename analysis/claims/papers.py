"""The papers the claims come from, and how methods are named in claim wording.

Sources quote the sentence of the paper's abstract that makes the claim (quotes checked against
the abstracts; a paraphrase says so), and claims name the repository's paper experiment that
measures them (conf/experiment/paper/). Section numbers are not given: they were not checked
against the papers' PDFs.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from sparsifiers import registry

DEFT = "DEFT (Yoon & Oh, ICPP 2023, arXiv 2307.03500)"
MICRO = "MiCRO (Yoon & Oh, HiPC 2023, arXiv 2310.00967)"
EXDYNA = "ExDyna (Yoon & Oh, arXiv 2402.13781)"
DGC = "DGC (Lin et al., ICLR 2018, arXiv 1712.01887)"
SCALECOM = "ScaleCom (Chen et al., NeurIPS 2020)"
OKTOPK = "Ok-Topk (Li & Hoefler, PPoPP 2022, arXiv 2201.07598)"

# The method's own paper, for claims about one of the partition methods.
PAPER_OF = {"deft": DEFT, "micro": MICRO, "exdyna": EXDYNA}

class _Titles(Mapping[str, str]):
    """Sparsifier name -> how the claims write it (the registry's title), read from the registry
    when asked: a method registered after this module was imported (SPARSEBENCH_METHODS, a test's
    fixture) is named like the others."""

    def __getitem__(self, name: str) -> str:
        if not registry.is_method(name):
            raise KeyError(name)
        return registry.method(name).title

    def __iter__(self) -> Iterator[str]:
        return iter(registry.names())

    def __len__(self) -> int:
        return len(registry.names())


NAMES: Mapping[str, str] = _Titles()


# The laptop study of the per-step claims (conf/experiment/laptop/statistics.yaml): claims judged on
# every step of training runs name it beside the paper experiments that measure them (Claim.studies).
LAPTOP_STATISTICS = "statistics"


def experiment(name: str) -> str:
    """Where the repository measures it: `python run.py -m experiment=paper/<name>`."""
    return f"experiment=paper/{name}"
