"""The papers' testable claims as data, judged by pure functions over a study's run directories.

    from analysis.claims import judge_paths
    verdicts, study = judge_paths(["outputs/sweeps/2026-11-29_17-49-22"])

or `python -m analysis.claims <study dirs...> [--out DIR]` (claims.md, claims.json). Each claim
(analysis.claims.claim.Claim) states its wording, source, the study it needs, its statistic and
its criterion; docs/claims.md explains every one. Like the rest of the analysis, this reads run
directories only, so a paper-scale study made elsewhere is judged by the same code.
"""
from analysis.claims.claim import Claim, Outcome, Statistic, Verdict
from analysis.claims.judge import judge, judge_paths, judge_study, judge_tables
from analysis.claims.registry import BY_ID, CLAIMS

__all__ = ["BY_ID", "CLAIMS", "Claim", "Outcome", "Statistic", "Verdict", "judge", "judge_paths", "judge_study", "judge_tables"]
