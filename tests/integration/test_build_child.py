"""rattler-build runs in a child process (packaging/build_child.py): a failing build reports
rattler-build's one line, and its log holds the build's own lines followed by that error."""

from __future__ import annotations

from lmsforge.packaging import rattler as build

FAILING = """\
schema_version: 1
package:
  name: failing
  version: "1.0"
build:
  script:
    - echo "compiling the first part"
    - echo "the cause of it all" && exit 3
"""


def test_a_failing_build_reports_its_error_and_keeps_its_lines_in_the_log(tmp_path):
    recipe = tmp_path / "recipe" / "recipe.yaml"
    recipe.parent.mkdir()
    recipe.write_text(FAILING)
    out, log = tmp_path / "out", tmp_path / "logs" / "build.log"
    shown: list[str] = []
    call = {"recipe": str(recipe), "platform": "linux-64", "variants": {},
            "output_dir": str(out), "channels": [out.as_uri()], "isolation": "strict"}
    outcome = build._run_build_child(call, log, shown.append)
    assert outcome.packages == () and outcome.error, outcome
    assert any("the cause of it all" in line for line in shown), shown
    build._write_log(log, out, outcome.error, None)
    text = log.read_text()
    assert text.index("the cause of it all") < text.index(outcome.error)
    assert not list(out.glob("*/failing-*.conda"))
