"""A multi-Python build makes its Python-independent output once (issue 27 item 5).

The full profiles have the shape of this small recipe: one output that does not depend on Python
(``libtorch``) and one per Python (``pytorch``), pinned exactly to the first. Each Python is one
combination, built by its own rattler-build call (one per call: see packaging/rattler.py), into
the one output folder lmsforge keeps per series and upstream tree. The second call must not build
the shared output again, and both Pythons land in one channel beside a single shared package.
Real rattler-build builds of a recipe with no requirements (offline), through the build child.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from lmsforge.channel import publisher
from lmsforge.commands import build as build_command
from lmsforge.packaging import rattler as build, recipes

RECIPE = """\
schema_version: 1
context:
  version: "1.0"
recipe:
  name: shape
  version: ${{ version }}
outputs:
  - package:
      name: libshape
    build:
      script:
        - mkdir -p $PREFIX/lib && echo "built $(date +%s%N)" > $PREFIX/lib/libshape.txt
  - package:
      name: pyshape
    build:
      string: py${{ python | replace(".", "") }}_0
      variant:
        use_keys: [python]
      script:
        - mkdir -p $PREFIX/share && echo ${{ python }} > $PREFIX/share/pyshape.txt
    requirements:
      run:
        - ${{ pin_subpackage("libshape", exact=True) }}
"""


def _build(recipe: Path, out: Path, python: str, log: Path) -> list[Path]:
    call = {"recipe": str(recipe), "platform": "linux-64", "variants": {"python": [python]},
            "output_dir": str(out), "channels": [out.as_uri()], "isolation": "strict"}
    outcome = build._run_build_child(call, log, None)
    assert outcome.error is None, outcome.error
    return [Path(p) for p in outcome.packages]


def _depends(package: Path) -> list[str]:
    from conda_package_streaming import package_streaming

    for tar, member in package_streaming.stream_conda_component(str(package), component="info"):
        if member.name == "info/index.json":
            return json.loads(tar.extractfile(member).read())["depends"]
    raise AssertionError(f"{package} has no info/index.json")


def test_two_pythons_build_the_shared_output_once_into_one_channel(tmp_path):
    recipe = tmp_path / "recipe" / "recipe.yaml"
    recipe.parent.mkdir()
    recipe.write_text(RECIPE)
    out = tmp_path / "out"
    first = _build(recipe, out, "3.11", tmp_path / "log-311.txt")
    [shared] = [p for p in first if p.name.startswith("libshape-")]
    built_once = shared.read_bytes()
    second = _build(recipe, out, "3.12", tmp_path / "log-312.txt")

    assert f"Skipping build for {shared.name.removesuffix('.conda')}" in \
        (tmp_path / "log-312.txt").read_text()
    assert shared.read_bytes() == built_once  # not rebuilt: the same bytes, not just a name
    for package in second:
        assert zipfile.is_zipfile(package)
    [py312] = [p for p in second if p.name.startswith("pyshape-") and "py312" in p.name]
    exact = shared.name.removesuffix(".conda").split("-")
    assert f"libshape =={exact[1]} {exact[2]}" in _depends(py312)

    channel = tmp_path / "channel"
    publisher.publish(sorted(set(first) | set(second)), channel)
    index = json.loads((channel / "linux-64" / "repodata.json").read_text())
    names = sorted(index.get("packages.conda", {}))
    assert names == sorted({shared.name, py312.name,
                            *[p.name for p in first if "py311" in p.name]}), names


def test_another_series_upstream_or_recipe_builds_into_another_output_folder(tmp_path):
    """rattler-build skips an output by its file name, which does not change with the series or
    the recipe: a folder shared between them would hand out a package built from other sources,
    or without the licence file a newer recipe adds (a test build got the stale package)."""
    recipe = tmp_path / "recipe"
    (recipe / "licenses").mkdir(parents=True)
    (recipe / "recipe.yaml").write_text("license_file: [LICENSE]\n")
    (recipe / "licenses" / "fmt.txt").write_text("MIT\n")
    upstream = {"kind": "archive", "sha256": "a" * 64}
    one = recipes.SeriesIdentity("pytorch", "v2.6.0", "1" * 64, upstream)
    key = build_command.build_key(one, recipe)
    assert key == build_command.build_key(
        recipes.SeriesIdentity("pytorch", "v2.6.0", "1" * 64, dict(upstream)), recipe)
    assert key != build_command.build_key(
        recipes.SeriesIdentity("pytorch", "v2.6.0", "2" * 64, upstream), recipe)
    assert key != build_command.build_key(
        recipes.SeriesIdentity("pytorch", "v2.6.0", "1" * 64, {**upstream, "sha256": "b" * 64}),
        recipe)
    (recipe / "recipe.yaml").write_text("license_file: [LICENSE, NOTICE]\n")
    changed = build_command.build_key(one, recipe)
    assert changed != key
    (recipe / "licenses" / "fmt.txt").write_text("MIT, another year\n")
    assert build_command.build_key(one, recipe) not in (key, changed)
