"""The documents a clone ships point only at what a clone has (hostile-inputs row 27: docs cited
`../shared/...`, which exists on the project's machines only, and dead paths)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md")),
             *sorted((REPO / "lmsforge").rglob("README.md")), *sorted((REPO / "bench").rglob("*.md")),
             *sorted((REPO / "examples").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_relative_link_in_the_documents_leads_to_a_file_of_the_clone():
    dead = []
    for document in DOCUMENTS:
        for match in LINK.finditer(document.read_text()):
            target = match.group(1).split("#")[0]
            if target and not re.match(r"[a-z][a-z0-9+.-]*:", target) and \
                    not (document.parent / target).exists():
                dead.append(f"{document.relative_to(REPO)}: {target}")
    assert dead == []


def test_no_document_sends_a_reader_outside_the_clone():
    outside = [f"{document.relative_to(REPO)}:{number}"
               for document in DOCUMENTS
               for number, line in enumerate(document.read_text().splitlines(), 1)
               if re.search(r"(\.\./)+shared/|\bshared/(evidence|design)/", line)]
    assert outside == []
