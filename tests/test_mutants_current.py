"""`make mutants` plants each bug of tests/helpers/mutants.py by replacing one exact piece of code. When the
code moves or changes, the mutant goes stale: make mutants reports it, but only when someone runs
it (about an hour). This checks in a second what staleness means, so a refactor that moves code
updates its mutants in the same change."""
from __future__ import annotations

from pathlib import Path

from tests.helpers.mutants import MUTANTS

REPO = Path(__file__).resolve().parents[1]


def test_every_mutant_names_code_that_occurs_exactly_once():
    stale = []
    for mutant in MUTANTS:
        path = REPO / mutant.path
        occurrences = path.read_text().count(mutant.old) if path.is_file() else 0
        if occurrences != 1:
            stale.append(f"{mutant.name}: {mutant.path} holds its code {occurrences} times")
    assert not stale, "stale mutants (update tests/helpers/mutants.py with the code they plant a bug in):\n" + "\n".join(stale)


def test_every_mutant_names_tests_that_exist_and_a_real_change():
    for mutant in MUTANTS:
        assert mutant.old != mutant.new, mutant.name
        missing = [test for test in mutant.first if not (REPO / test).is_file()]
        assert not missing, f"{mutant.name}: its first tests {missing} do not exist"
    names = [mutant.name for mutant in MUTANTS]
    assert len(names) == len(set(names)), "two mutants share a name (--only could not tell them apart)"
