"""The refused feature pairs that docs/architecture.md lists are exactly the ones the checks refuse.

Every pair of tests/feature_matrix.py's features goes through `config validate`'s checks (no model
is loaded); a pair that starts or stops being refused must be written down (or struck) there, with
its reason: `python -m tests.feature_matrix` prints the table.
"""

from __future__ import annotations

import re
from pathlib import Path

from feature_matrix import FEATURES, alone_refusals, refused_pairs

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
HEADING = "## Refused feature pairs"


def documented_pairs() -> set[frozenset[str]]:
    text = DOC.read_text()
    assert HEADING in text, f"{DOC} has no '{HEADING}' section"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+?) \| ", section, flags=re.MULTILINE)
    return {frozenset(row) for row in rows if row != ("feature", "feature") and not row[0].startswith("---")}


def test_every_feature_runs_on_its_own() -> None:
    assert alone_refusals() == {}


def test_refused_pairs_are_the_documented_ones() -> None:
    tried, refused = refused_pairs()
    names = {f.name for f in FEATURES}
    found = {frozenset((a, b)): why for a, b, why in refused}
    documented = documented_pairs()
    assert all(pair <= names for pair in documented), f"{DOC} names a feature tests/feature_matrix.py does not have"
    newly_refused = [f"{' x '.join(sorted(p))}: {found[p]}" for p in found.keys() - documented]
    now_allowed = [" x ".join(sorted(p)) for p in documented - found.keys()]
    assert not newly_refused and not now_allowed, (
        f"{DOC}'s refused pairs are out of date ({len(found)} of {tried} refused now; `python -m tests.feature_matrix` "
        f"prints the table).\nrefused but not listed: {newly_refused}\nlisted but no longer refused: {now_allowed}"
    )
