"""The papers the claims come from, and how methods are named in claim wording.

Sources quote the sentence of the paper's abstract that makes the claim (quotes checked against
the abstracts; a paraphrase says so), and claims name the repository's paper experiment that
measures them (conf/experiment/paper/). Section numbers are not given: they were not checked
against the papers' PDFs.
"""
from __future__ import annotations

from sparsifiers.registry import METHODS

DEFT = "DEFT (Yoon & Oh, ICPP 2023, arXiv 2307.03500)"
MICRO = "MiCRO (Yoon & Oh, HiPC 2023, arXiv 2310.00967)"
EXDYNA = "ExDyna (Yoon & Oh, arXiv 2402.13781)"
DGC = "DGC (Lin et al., ICLR 2018, arXiv 1712.01887)"
SCALECOM = "ScaleCom (Chen et al., NeurIPS 2020)"
OKTOPK = "Ok-Topk (Li & Hoefler, PPoPP 2022, arXiv 2201.07598)"

# The method's own paper, for claims about one of the partition methods.
PAPER_OF = {"deft": DEFT, "micro": MICRO, "exdyna": EXDYNA}

# Sparsifier name -> how the claims write it (the registry's title).
NAMES = {entry.name: entry.title for entry in METHODS}


# The laptop study of the per-step claims (conf/experiment/laptop/statistics.yaml): claims judged on
# every step of training runs name it beside the paper experiments that measure them (Claim.studies).
LAPTOP_STATISTICS = "statistics"


def experiment(name: str) -> str:
    """Where the repository measures it: `python run.py -m experiment=paper/<name>`."""
    return f"experiment=paper/{name}"
