"""Every claim, in the order the table lists them: selection cost, build-up, traffic, density
control, load balance, DEFT's allocation, convergence, DGC. Criteria were written down before
any real study was judged (docs/claims.md); a criterion is never tuned to make a study pass."""
from __future__ import annotations

from analysis.claims import balance, buildup, convergence, deft, density, dgc, selection, traffic
from analysis.claims.claim import Claim

CLAIMS: tuple[Claim, ...] = (
    *selection.CLAIMS,
    *buildup.CLAIMS,
    *traffic.CLAIMS,
    *density.CLAIMS,
    *balance.CLAIMS,
    *deft.CLAIMS,
    *convergence.CLAIMS,
    *dgc.CLAIMS,
)
BY_ID: dict[str, Claim] = {claim.id: claim for claim in CLAIMS}
assert len(BY_ID) == len(CLAIMS), "claim ids must be unique"
