"""Rendering recipes and variant matrices (rattler-build renders, nothing is built)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lmsforge.errors import UsageError
from lmsforge.packaging import recipes

PYTORCH = recipes.SeriesIdentity(
    "pytorch", "v2.6.0", "f" * 64,
    {"kind": "archive", "archive": "pytorch_2.6.0+dfsg.orig.tar.xz", "sha256": "0" * 64})
TENSORFLOW = recipes.SeriesIdentity("tensorflow", "v2.14.1", "e" * 64, {"kind": "git"})


def _render(tmp_path: Path, series: recipes.SeriesIdentity, profile: str, platform: str,
            **kwargs: object) -> recipes.RenderResult:
    return recipes.render(series.framework, series.tag, profile, platform,
                          tmp_path / f"{profile}-{platform}", series=series, **kwargs)


@pytest.mark.parametrize("platform", recipes.PLATFORMS)
def test_pytorch_full_renders_every_variant_with_cuda_12(tmp_path, platform):
    result = _render(tmp_path, PYTORCH, "full", platform)
    cudas = {combo["cuda_version"] for combo in result.matrix}
    pythons = {combo["python"] for combo in result.matrix}
    assert pythons == {"3.9", "3.10", "3.11", "3.12", "3.13"}
    assert cudas == ({"None", "12.4", "12.6"} if platform == "linux-64" else {"None", "12.4"})
    assert len(result.matrix) == len(pythons) * len(cudas) == len(result.outputs)
    for combo, outputs in zip(result.matrix, result.outputs):
        names = {o.name: o for o in outputs}
        assert set(names) == {"libtorch", "pytorch", "pytorch-lms"}
        flavour = "cpu" if combo["cuda_version"] == "None" else \
            "cuda" + combo["cuda_version"].replace(".", "")
        pytorch = names["pytorch"]
        assert pytorch.version == "2.6.0"
        assert pytorch.build_string.startswith(
            f"{flavour}_lms_py{combo['python'].replace('.', '')}_h")
        number = int(pytorch.build_string.rsplit("_", 1)[1])
        assert number == (1200 if flavour != "cpu" else 1000)


@pytest.mark.parametrize("platform", recipes.PLATFORMS)
def test_tensorflow_full_renders_every_variant(tmp_path, platform):
    result = _render(tmp_path, TENSORFLOW, "full", platform)
    assert {c["python"] for c in result.matrix} == {"3.9", "3.10", "3.11"}
    assert {c["cuda_version"] for c in result.matrix} == {"None", "11.8"}
    tflms = set()
    for outputs in result.outputs:
        names = {o.name: o for o in outputs}
        assert set(names) == {"tensorflow-base", "tensorflow", "tensorflow-large-model-support"}
        tflms.add(names["tensorflow-large-model-support"].build_string)
    # TFLMSv2's surface is one noarch package for every variant (pure Python, no CUDA offset).
    [build_string] = tflms
    assert build_string.startswith("pyh") and build_string.endswith("_1000")


def test_tensorflow_ships_tflmsv2s_package_from_the_checkout(tmp_path):
    result = _render(tmp_path, TENSORFLOW, "full", "linux-64")
    recipe = yaml.safe_load(result.recipe_file.read_text())
    outputs = {o["package"]["name"]: o for o in recipe["outputs"]}
    tflms = outputs["tensorflow-large-model-support"]
    assert tflms["build"]["noarch"] == "python"
    [script] = tflms["build"]["script"]
    package = Path(json.loads(script.split("pip install ", 1)[1].split(" --no-deps")[0]))
    assert (package / "pyproject.toml").is_file()
    assert (package / "tensorflow_large_model_support" / "lms.py").is_file()
    # `conda install tensorflow` brings it: the meta-package pins the one built beside it.
    assert "${{ pin_subpackage('tensorflow-large-model-support', exact=True) }}" in \
        outputs["tensorflow"]["requirements"]["run"]


@pytest.mark.parametrize("platform", recipes.PLATFORMS)
def test_core_profile_varies_only_over_cuda(tmp_path, platform):
    result = _render(tmp_path, PYTORCH, "core", platform)
    assert all(set(combo) == {"cuda_version"} for combo in result.matrix)
    [[cpu]] = [o for c, o in zip(result.matrix, result.outputs) if c["cuda_version"] == "None"]
    assert cpu.name == "pytorch-lms-core" and cpu.build_string.startswith("cpu_lms_h")


def test_rendered_recipe_records_upstream_identity_and_series_hash(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    result = _render(tmp_path, PYTORCH, "core", "linux-64", source_tree=tree)
    recipe = yaml.safe_load(result.recipe_file.read_text())
    extra = recipe["extra"]["lmsforge"]
    assert extra["series_hash"] == "f" * 64
    assert extra["upstream_sha256"] == "0" * 64
    assert extra["upstream_archive"] == "pytorch_2.6.0+dfsg.orig.tar.xz"
    assert "f" * 64 in recipe["about"]["description"]
    assert recipe["source"][0]["path"] == str(tree.resolve())
    assert "patches" not in recipe["source"][0]  # lmsforge applied the series, not rattler-build
    identity = json.loads(recipe["build"]["script"]["env"]["LMS_IDENTITY_JSON"])
    assert identity["series_hash"] == "f" * 64 and identity["profile"] == "core"
    assert (result.recipe_dir / "build.sh").is_file()


def test_cuda_variants_require_the_cuda_virtual_package(tmp_path):
    result = _render(tmp_path, PYTORCH, "core", "linux-64")
    text = result.recipe_file.read_text()
    assert "then: __cuda >=${{ cuda_version }}" in text


def test_variant_overrides_narrow_the_matrix(tmp_path):
    result = _render(tmp_path, PYTORCH, "full", "linux-64",
                     variants=recipes.parse_variant_args(["cuda=12.4", "python=3.11,3.12"]))
    assert list(result.matrix) == [{"python": "3.11", "cuda_version": "12.4"},
                                   {"python": "3.12", "cuda_version": "12.4"}]
    assert recipes.parse_variant_args(["cuda=cpu"]) == {"cuda_version": ["None"]}


def test_cuda_12_6_on_ppc64le_is_a_one_line_error(tmp_path):
    with pytest.raises(UsageError) as info:
        _render(tmp_path, PYTORCH, "full", "linux-ppc64le",
                variants=recipes.parse_variant_args(["cuda=12.6"]))
    message = str(info.value)
    assert message == ("CUDA 12.6 is not a valid variant of pytorch v2.6.0 on linux-ppc64le "
                       "(NVIDIA's last CUDA for linux-ppc64le is 12.4); choose one of: cpu, 12.4")
    assert not (tmp_path / "full-linux-ppc64le").exists()


def test_ppc64le_ceiling_holds_even_if_a_variant_file_lists_more(tmp_path):
    root = tmp_path / "recipes"
    (root / "pytorch").mkdir(parents=True)
    for item in ("core", "full"):
        (root / "pytorch" / item).symlink_to(recipes.RECIPES_ROOT / "pytorch" / item)
    (root / "pytorch" / "variants").mkdir()
    (root / "pytorch" / "variants" / "v2.6.0.yaml").write_text(yaml.safe_dump({
        "framework": "pytorch", "tag": "v2.6.0", "python": ["3.12"],
        "cuda_version": ["None", "12.4", "12.6", "12.8"]}))
    variants = recipes.load_variants("pytorch", "v2.6.0", root)
    assert variants.allowed("cuda_version", "linux-ppc64le") == ["None", "12.4"]
    assert variants.allowed("cuda_version", "linux-64") == ["None", "12.4", "12.6", "12.8"]


@pytest.mark.parametrize("args, match", [
    (["python=3.8"], "python 3.8 is not a valid variant of pytorch v2.6.0 on linux-64"),
    (["cudnn=9"], "varies only over"),
    (["cuda"], "expected KEY=VALUE"),
])
def test_bad_variants_are_usage_errors(tmp_path, args, match):
    with pytest.raises(UsageError, match=match):
        _render(tmp_path, PYTORCH, "full", "linux-64", variants=recipes.parse_variant_args(args))


@pytest.mark.parametrize("framework, tag, profile, platform, match", [
    ("pytorch", "v2.6.0", "full", "linux-aarch64", "unknown platform"),
    ("tensorflow", "v2.14.1", "core", "linux-64", "tensorflow has no core profile"),
    ("pytorch", "v9.9.9", "full", "linux-64", "no variant file for pytorch v9.9.9"),
    ("jax", "v0.4.0", "full", "linux-64", "unknown framework"),
])
def test_bad_targets_are_usage_errors(tmp_path, framework, tag, profile, platform, match):
    series = recipes.SeriesIdentity(framework, tag, "0", {})
    with pytest.raises(UsageError, match=match):
        recipes.render(framework, tag, profile, platform, tmp_path / "out", series=series)


def test_series_hash_covers_patches_and_manifest(tmp_path):
    series = tmp_path / "v2.6.0"
    series.mkdir()
    (series / "series.yaml").write_text("format: 1\n")
    (series / "0010-a.patch").write_text("a\n")
    first = recipes.series_hash(series)
    (series / "notes.txt").write_text("not part of the series\n")
    assert recipes.series_hash(series) == first
    (series / "0010-a.patch").write_text("b\n")
    assert recipes.series_hash(series) != first
    with pytest.raises(UsageError, match="no such series folder"):
        recipes.series_hash(tmp_path / "missing")
