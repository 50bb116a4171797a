"""Render rattler-build v1 recipes and the variant matrix for a framework, tag, profile, platform.

``recipes/<framework>/<profile>/recipe.yaml.j2`` is a Jinja2 template whose own delimiters are
``[[ ... ]]`` and ``[% ... %]``, so rattler-build's ``${{ ... }}`` passes through untouched; other files in that folder
(build scripts) are copied beside the rendered ``recipe.yaml``. ``recipes/<framework>/variants/
<tag>.yaml`` says which python and CUDA versions are valid for that tag on each platform. The
matrix is every combination of the keys the profile varies over; each combination is one
rattler-build call (``rattler.py``).

Package names: the ``full`` profiles use conda-forge's names (PyTorch: ``libtorch`` + ``pytorch``;
TensorFlow: ``tensorflow-base`` + ``tensorflow``), so ``conda install -c <channel> pytorch`` asks for
our package by the name users type, and dependents built against conda-forge's packages
(torchvision depends on ``pytorch`` and, through run-exports, on ``libtorch``) resolve against ours.
Three things make the solver pick the LMS build on a GPU cluster: the private channel comes first
(strict priority), build numbers start at 1000 (above conda-forge's for the same version, so the
LMS build wins even with flexible priority) plus 200 for CUDA builds, and CUDA builds require
``__cuda`` so that a host without a driver gets the CPU build. Build strings begin with
``cuda<ver>_``/``cpu_`` like conda-forge's, so selectors such as ``pytorch=*=cuda*`` keep working,
and carry ``_lms_`` so users (and ``lmsforge test``) can tell the build apart. ``pytorch-lms`` is a
meta-package pinned exactly to one ``pytorch`` build, for users who want to ask for LMS by name.
The ``core`` profile is a different thing (``pytorch-lms-core``: c10 + tests), so it gets its own
name and cannot be mistaken for the framework.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import jinja2
import yaml

from lmsforge import bundled
from lmsforge.errors import LmsforgeError, UsageError

RECIPES_ROOT = bundled.path("recipes")
HARNESS_DIR = Path(__file__).resolve().parents[1] / "verify" / "pytorch_c10"
TFLMS_PACKAGE = "tensorflow-large-model-support"
PLATFORMS = ("linux-64", "linux-ppc64le")
PROFILES = {"pytorch": ("core", "full"), "tensorflow": ("full",)}
# Keys each profile's matrix varies over (the rest of the variant file is passed through).
MATRIX_KEYS = {"core": ("cuda_version",), "full": ("python", "cuda_version")}
MATRIX_AXES = ("python", "cuda_version")  # also as ``<profile>_<key>`` in a variant file
# NVIDIA's last CUDA release for a platform, whatever a variant file says.
CUDA_CEILING = {"linux-ppc64le": (12, 4)}
KEY_ALIASES = {"cuda": "cuda_version", "py": "python"}
VALUE_ALIASES = {"cpu": "None", "none": "None"}


@dataclass(frozen=True)
class SeriesIdentity:
    """What a package is built from: the upstream tree and the LMS series applied to it."""

    framework: str
    tag: str
    series_hash: str
    upstream: Mapping[str, str] = field(default_factory=dict)  # kind, commit, archive, sha256, ...

    def description(self) -> str:
        upstream = ", ".join(f"{k} {v}" for k, v in self.upstream.items()) or "unknown"
        return (f"LMS series {self.framework}/{self.tag} (series hash {self.series_hash}) "
                f"applied by lmsforge to upstream {self.framework} {self.tag} ({upstream}).")

    def to_json(self) -> dict[str, object]:
        return {"framework": self.framework, "tag": self.tag, "series_hash": self.series_hash,
                "upstream": dict(self.upstream)}


def series_hash(series_dir: Path) -> str:
    """sha256 over the series' manifest, order file and patches (names and bytes, sorted)."""
    if not series_dir.is_dir():
        raise UsageError(f"{series_dir}: no such series folder; export the series first")
    digest = hashlib.sha256()
    for path in sorted(series_dir.iterdir()):
        if path.is_file() and (path.suffix == ".patch" or path.name in ("series", "series.yaml")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class TagVariants:
    """A per-tag variant file: valid values for each key, per platform where they differ."""

    framework: str
    tag: str
    path: Path
    lms_build_number: int
    values: Mapping[str, object]  # key -> list, or {platform: list}

    def allowed(self, key: str, platform: str, profile: str | None = None) -> list[str]:
        """KEY's values on PLATFORM; a ``<profile>_<key>`` entry, if any, wins for PROFILE."""
        raw = self.values.get(f"{profile}_{key}") if profile else None
        if raw is None:
            raw = self.values.get(key)
        if isinstance(raw, dict):
            raw = raw.get(platform)
        if raw is None:
            raise UsageError(f"{self.path}: {key} has no values for {platform}; "
                             f"{self.framework} {self.tag} is not built for {platform}")
        values = [str(v) for v in raw]
        if key == "cuda_version" and platform in CUDA_CEILING:
            values = [v for v in values if v == "None" or _version(v) <= CUDA_CEILING[platform]]
        return values

    def passthrough(self, platform: str) -> dict[str, list[str]]:
        """Non-matrix keys (compilers, cudnn, bazel) as rattler-build variant lists."""
        result = {}
        for key, raw in self.values.items():
            if key.endswith(MATRIX_AXES):
                continue
            if isinstance(raw, dict):
                raw = raw.get(platform, [])
            result[key] = [str(v) for v in raw]
        return result


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        raise UsageError(f"'{text}' is not a version number; use e.g. 12.4") from None


def load_variants(framework: str, tag: str, recipes_root: Path = RECIPES_ROOT) -> TagVariants:
    path = recipes_root / framework / "variants" / f"{tag}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (recipes_root / framework / "variants").glob("*.yaml"))
        raise UsageError(f"no variant file for {framework} {tag} ({path}); tags with one: "
                         f"{', '.join(known) or 'none'}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        raise UsageError(f"{path}: not valid YAML; fix the file") from None
    if not isinstance(data, dict) or data.get("framework") != framework or data.get("tag") != tag:
        raise UsageError(f"{path}: must be a mapping with framework: {framework} and tag: {tag}")
    values = {k: v for k, v in data.items() if k not in ("framework", "tag", "lms_build_number")}
    return TagVariants(framework, tag, path, int(data.get("lms_build_number", 0)), values)


def parse_variant_args(items: Sequence[str]) -> dict[str, list[str]]:
    """``["cuda=12.4", "python=3.11,3.12"]`` -> ``{"cuda_version": ["12.4"], "python": [...]}``."""
    result: dict[str, list[str]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"--variant {item}: expected KEY=VALUE[,VALUE], e.g. cuda=12.4")
        key = KEY_ALIASES.get(key.strip(), key.strip())
        values = [VALUE_ALIASES.get(v.strip().lower(), v.strip()) for v in value.split(",")]
        result.setdefault(key, []).extend(values)
    return result


def variant_matrix(variants: TagVariants, profile: str, platform: str,
                   overrides: Mapping[str, Sequence[str]] = ()) -> list[dict[str, str]]:
    """Every combination the profile builds for PLATFORM, narrowed by OVERRIDES (validated)."""
    _check_platform(platform)
    keys = MATRIX_KEYS[profile]
    overrides = dict(overrides or {})
    for key in overrides:
        if key not in keys:
            raise UsageError(f"--variant {key}: the {profile} profile varies only over "
                             f"{', '.join(keys)}")
    axes = []
    for key in keys:
        allowed = variants.allowed(key, platform, profile)
        chosen = list(overrides.get(key, allowed))
        for value in chosen:
            if value not in allowed:
                raise UsageError(_unsupported(variants, key, value, platform, allowed))
        axes.append(chosen)
    return [dict(zip(keys, combo)) for combo in itertools.product(*axes)]


def _unsupported(variants: TagVariants, key: str, value: str, platform: str,
                 allowed: list[str]) -> str:
    what = f"CUDA {value}" if key == "cuda_version" else f"{key} {value}"
    why = ""
    if key == "cuda_version" and platform in CUDA_CEILING and value != "None":
        ceiling = ".".join(map(str, CUDA_CEILING[platform]))
        if _version(value) > CUDA_CEILING[platform]:
            why = f" (NVIDIA's last CUDA for {platform} is {ceiling})"
    shown = ", ".join("cpu" if v == "None" else v for v in allowed)
    return (f"{what} is not a valid variant of {variants.framework} {variants.tag} on "
            f"{platform}{why}; choose one of: {shown}")


def _check_platform(platform: str) -> None:
    if platform not in PLATFORMS:
        raise UsageError(f"unknown platform {platform}; choose one of: {', '.join(PLATFORMS)}")


@dataclass(frozen=True)
class RenderedOutput:
    name: str
    version: str
    build_string: str


@dataclass(frozen=True)
class RenderResult:
    framework: str
    tag: str
    profile: str
    platform: str
    recipe_dir: Path  # the rendered recipe.yaml, build scripts and variants.yaml
    matrix: tuple[dict[str, str], ...]  # one rattler-build call each
    outputs: tuple[tuple[RenderedOutput, ...], ...]  # per combination, what it produces
    variants: TagVariants  # the per-tag variant file the matrix came from

    @property
    def recipe_file(self) -> Path:
        return self.recipe_dir / "recipe.yaml"


def render(framework: str, tag: str, profile: str, platform: str, out_dir: Path, *,
           series: SeriesIdentity, source_tree: Path | None = None,
           variants: Mapping[str, Sequence[str]] | None = None,
           build_facts: Mapping[str, str] | None = None,
           licenses: Mapping[str, Path] | None = None, cuda_license: Path | None = None,
           recipes_root: Path = RECIPES_ROOT) -> RenderResult:
    """Render the recipe for (FRAMEWORK, TAG, PROFILE) into OUT_DIR and the matrix for PLATFORM.

    SOURCE_TREE is the applied tree the recipe builds from (``render`` alone may leave it out: a
    placeholder path is used). VARIANTS narrows the matrix (``parse_variant_args``); a value the
    tag does not support on PLATFORM is a ``UsageError``. BUILD_FACTS (the toolchain, the
    sysroot) are recorded in the package's metadata beside the series identity; its ``glibc``
    becomes the packages' ``__glibc`` floor. LICENSES (name -> text) are the licences of what the
    packages carry besides the framework, CUDA_LICENSE the CUDA runtime's (CUDA variants carry
    libcudart): copied beside the recipe and shipped in each package's info/licenses.
    """
    if framework not in PROFILES:
        raise UsageError(f"unknown framework {framework}; choose one of: {', '.join(PROFILES)}")
    if profile not in PROFILES[framework]:
        raise UsageError(f"{framework} has no {profile} profile; choose one of: "
                         f"{', '.join(PROFILES[framework])}")
    if series.framework != framework or series.tag != tag:
        raise UsageError(f"series {series.framework}/{series.tag} does not match "
                         f"{framework}/{tag}")
    tag_variants = load_variants(framework, tag, recipes_root)
    matrix = variant_matrix(tag_variants, profile, platform, variants or {})
    template_dir = recipes_root / framework / profile
    out_dir.mkdir(parents=True, exist_ok=True)
    facts = {"platform": platform, **(build_facts or {})}
    shipped = _copy_licenses(out_dir, licenses or {}, cuda_license)
    _write_recipe(template_dir, out_dir, tag, tag_variants, series, profile,
                  source_tree or out_dir / "source-tree-placeholder", facts, shipped)
    outputs = tuple(_rattler_outputs(out_dir, tag_variants, combo, platform) for combo in matrix)
    return RenderResult(framework, tag, profile, platform, out_dir, tuple(matrix), outputs,
                        tag_variants)


def _write_recipe(template_dir: Path, out_dir: Path, tag: str, tag_variants: TagVariants,
                  series: SeriesIdentity, profile: str, source_tree: Path,
                  facts: Mapping[str, str], licenses: Mapping[str, list[str]]) -> None:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(template_dir)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             variable_start_string="[[", variable_end_string="]]",
                             block_start_string="[%", block_end_string="%]",
                             comment_start_string="[#", comment_end_string="#]")
    identity = {**series.to_json(), "profile": profile, **facts}
    extra = {"framework": series.framework, "tag": series.tag, "profile": profile,
             "series_hash": series.series_hash,
             **{f"upstream_{k}": v for k, v in series.upstream.items()}, **facts}
    context = {
        "version": tag.lstrip("v"),
        "lms_build_number": tag_variants.lms_build_number,
        "source_tree": json.dumps(str(source_tree.resolve())),
        "harness_dir": json.dumps(str(HARNESS_DIR)),
        # TFLMSv2's user surface, shipped as its own noarch output of TensorFlow's recipe.
        "tflms_package": json.dumps(str(bundled.path("packages") / TFLMS_PACKAGE)),
        "description": series.description(),
        "identity_json": json.dumps(identity, sort_keys=True).replace("'", "''"),
        "extra_yaml": "\n".join(f"    {k}: {json.dumps(str(v))}" for k, v in extra.items()),
        "glibc": facts.get("glibc", ""),
        "licenses": [json.dumps(f) for f in licenses.get("all", [])],
        "cuda_licenses": [json.dumps(f) for f in licenses.get("cuda", [])],
    }
    try:
        text = env.get_template("recipe.yaml.j2").render(**context)
    except jinja2.TemplateError as exc:
        raise LmsforgeError(f"{template_dir}/recipe.yaml.j2: {exc}; fix the template") from None
    (out_dir / "recipe.yaml").write_text(text)
    for path in template_dir.iterdir():
        if path.is_file() and path.name != "recipe.yaml.j2":
            shutil.copy2(path, out_dir / path.name)


def _copy_licenses(out_dir: Path, licenses: Mapping[str, Path],
                   cuda_license: Path | None) -> dict[str, list[str]]:
    """Copy the licence texts beside the recipe (rattler-build takes license files from the
    recipe's folder); returns their names relative to it: for every variant, and for CUDA ones."""
    folder = out_dir / "licenses"
    shutil.rmtree(folder, ignore_errors=True)
    shipped: dict[str, list[str]] = {"all": [], "cuda": []}
    chosen = [("all", name, path) for name, path in sorted(licenses.items())]
    if cuda_license is not None:
        chosen.append(("cuda", "cuda-runtime", cuda_license))
    for kind, name, path in chosen:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, folder / f"{name}.txt")
        shipped[kind].append(f"licenses/{name}.txt")
    return shipped


def variant_values(tag_variants: TagVariants, combo: Mapping[str, str],
                   platform: str) -> dict[str, list]:
    """The variant keys of one combination, exactly one value each (plain data: the build
    child receives it as JSON)."""
    values: dict[str, list] = {k: [v] for k, v in combo.items()}
    values.update({k: v[:1] for k, v in tag_variants.passthrough(platform).items() if v})
    return values


def rattler_variant_config(tag_variants: TagVariants, combo: Mapping[str, str], platform: str):
    """The rattler-build ``VariantConfig`` for one combination: exactly one value per key."""
    from rattler_build import VariantConfig

    return VariantConfig(variant_values(tag_variants, combo, platform))


def _rattler_outputs(recipe_dir: Path, tag_variants: TagVariants, combo: Mapping[str, str],
                     platform: str) -> tuple[RenderedOutput, ...]:
    from rattler_build import PlatformConfig, RenderConfig, Stage0Recipe

    try:
        recipe = Stage0Recipe.from_file(recipe_dir / "recipe.yaml")
        rendered = recipe.render(rattler_variant_config(tag_variants, combo, platform),
                                 RenderConfig(platform=PlatformConfig(target_platform=platform)))
    except Exception as exc:
        line = " ".join(str(exc).split())[:300]
        raise LmsforgeError(f"rattler-build could not render {recipe_dir}/recipe.yaml for "
                            f"{combo} on {platform}: {line}") from None
    outputs = []
    for variant in rendered:
        package = variant.recipe.package
        outputs.append(RenderedOutput(str(package.name), str(package.version),
                                      str(variant.recipe.build.string)))
    return tuple(outputs)
