"""`lmsforge build`: plan → inputs → fetch → apply → verify apply → render → rattler-build →
audit → publish to the channel.

Everything that can refuse the build is checked before the first compile: the variant matrix
against the host's CUDA toolkit (``build_plan``), the target platform, the channel folder, and
packages the channel already has under the same file name.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from lmsforge import ui
from lmsforge.packaging import (plan as build_plan, rattler as build, recipes, runtime_needs,
                                toolchain)
from lmsforge.channel import address as channel_address, pins, publisher
from lmsforge.series import catalogue, manifest as series_mod
from lmsforge.upstream import tree as upstream
from lmsforge.packaging.identity import series_identity
from lmsforge.errors import UsageError
from lmsforge.options import Options
from lmsforge.verify import apply_level


def run(opts: Options, framework: str, tag: str, profile: str, platform: str,
        variant_args: list[str], channel_arg: str | Path,
        fetch_kwargs: dict[str, object]) -> int:
    channel = _local_channel(channel_arg)  # a malformed channel fails before any work
    sources = catalogue.sources_for(opts.patches_dir, framework)
    series = series_mod.load(catalogue.series_folder(opts.patches_dir, sources, tag))
    variants = recipes.parse_variant_args(variant_args)
    matrix = recipes.variant_matrix(recipes.load_variants(framework, tag), profile, platform,
                                    variants)
    if profile == "core":
        toolchain.check_host(platform)
    plan = build_plan.plan(profile, platform, matrix, toolchain.host_cuda(platform),
                           variants.get("cuda_version", ()))
    publisher.check_publishable(channel)
    for notice in plan.notices:
        ui.out.print(f"notice: {notice}")
    tools = None
    if profile == "core":  # the full profile takes its compilers from conda channels
        with ui.step(f"checking the build inputs for {platform}"):
            tools = toolchain.prepare(platform, opts.cache.root,
                                      opts.cache.build_dir(framework, tag, "toolchains"))
    with ui.step(f"fetching {framework} {tag}"):
        tree_identity = upstream.fetch(sources, tag, opts.cache, **fetch_kwargs)  # type: ignore
    identity = series_identity(opts, framework, tag, tree_identity)
    tree_path = opts.cache.root / "trees" / framework / tag
    published = []
    with opts.cache.lock(f"tree-{framework}-{tag}"):
        with ui.step("applying and verifying the series (level apply)"):
            level = apply_level.run(tree_path, tree_identity, series)
        build.check_verified(framework, tag, level.status, level.detail)
        recipe_dir = opts.cache.build_dir(framework, tag, f"recipe-{profile}-{platform}")
        rendered = recipes.render(framework, tag, profile, platform, recipe_dir,
                                  series=identity, source_tree=tree_path, variants=variants,
                                  build_facts=tools.metadata() if tools else None,
                                  licenses=tools.licenses if tools else None,
                                  cuda_license=_cuda_runtime_license(profile, platform, matrix))
        todo = _not_yet_in_channel(rendered, plan, channel, identity)
        for combination in todo:
            label = ", ".join(f"{k}={v}" for k, v in combination.items()) or "default"
            live = ui.LiveLines()
            with ui.step(f"rattler-build {framework} {tag} {profile} ({label}) for {platform}",
                         progress=live.progress):
                result = build.build_variant(
                    rendered, combination, _output_folder(opts, framework, tag, identity, rendered),
                    tools=tools, jobs=opts.jobs, shown=live.show,
                    log_file=opts.cache.build_dir(framework, tag, "logs") / "rattler-build.log")
            for package in result.packages:
                ui.out.print(f"built {package.subdir}/{package.path.name} "
                             f"({package.size / 1e6:.1f} MB) in {result.seconds:.0f} s")
            for line in result.audit:
                ui.out.print(f"  audit: {line}")
            added = publisher.publish([p.path for p in result.packages], channel)
            for warning in added.warnings:
                ui.err.print(f"warning: {warning}", markup=False)
            published.extend(added.added)
            pinned = pins.write_pin_file(
                channel, platform, pins.pin_file_name(framework, tag, profile, combination),
                [(p.name, p.version, p.build_string) for p in result.packages],
                f"{framework} {tag} {profile} ({label}) for {platform}, series "
                f"{identity.series_hash[:12]}, upstream "
                f"{tree_identity.sha256 or tree_identity.commit}")
            ui.out.print(f"  pins: {pinned}")
    ui.out.print(f"local channel: {channel} ({len(published)} package(s) added; series hash "
                 f"{identity.series_hash[:12]}, upstream {tree_identity.kind} "
                 f"{tree_identity.sha256 or tree_identity.commit})")
    return 0


def _cuda_runtime_license(profile: str, platform: str,
                          matrix: list[dict[str, str]]) -> Path | None:
    """The CUDA runtime's licence, when a core CUDA variant (which carries libcudart) is built."""
    cuda = toolchain.host_cuda(platform)
    if profile != "core" or cuda is None or all(
            c.get("cuda_version", "None") == "None" for c in matrix):
        return None
    return runtime_needs.cuda_runtime_license(cuda.home)


def _local_channel(text: str | Path) -> Path:
    """The folder ``--channel`` names. Builds add to a folder channel only: a server gets the
    packages with ``lmsforge publish`` afterwards. Parsed as ``publish`` parses it, so
    ``file://lms-channel`` is refused as there instead of becoming ``./file:/lms-channel``."""
    address = channel_address.parse(text)
    if address.folder is None:
        raise UsageError(f"build --channel {address.shown}: builds add to a local folder "
                         "channel; build into a folder, then `lmsforge publish --channel "
                         f"{address.shown}` its packages")
    return address.folder


def _not_yet_in_channel(rendered: recipes.RenderResult, plan: build_plan.BuildPlan,
                        channel: Path, identity: recipes.SeriesIdentity) -> list[dict[str, str]]:
    """The planned combinations whose packages CHANNEL lacks; refuses one the channel has from
    another series or upstream tree (a package file name is never reused for other contents)."""
    todo = []
    for combination, outputs in zip(rendered.matrix, rendered.outputs):
        if combination not in plan.combinations:
            continue
        existing = [channel / rendered.platform / f"{o.name}-{o.version}-{o.build_string}.conda"
                    for o in outputs]
        present = [path for path in existing if path.is_file()]
        for path in present:
            recorded = build.package_identity(path)
            if not _same_build(recorded, identity):
                raise UsageError(
                    f"channel {channel} already has {path.name} built from series "
                    f"{str(recorded.get('series_hash', 'unknown'))[:12]}, not "
                    f"{identity.series_hash[:12]}; raise lms_build_number in "
                    f"{rendered.variants.path} or build into another channel")
        if present and len(present) == len(existing):
            ui.out.print(f"already in the channel, same series and upstream: "
                         f"{', '.join(p.name for p in present)}; not rebuilt")
            continue
        todo.append(dict(combination))
    return todo


def _output_folder(opts: Options, framework: str, tag: str, identity: recipes.SeriesIdentity,
                   rendered: recipes.RenderResult) -> Path:
    """rattler-build's output folder, one per series, upstream tree and recipe (build_key).
    rattler-build skips an output whose package is already there (a multi-Python build makes the
    Python-independent libtorch once, not once per Python); a package name does not change with
    the series or the recipe, so a shared folder would hand out a package built otherwise."""
    return (opts.cache.build_dir(framework, tag, "rattler-out")
            / build_key(identity, rendered.recipe_dir))


def build_key(identity: recipes.SeriesIdentity, recipe_dir: Path) -> str:
    """What makes two builds of one tag the same: the series, the upstream tree, and every byte
    of the rendered recipe (its scripts, licences) and of the harness the recipe builds with.
    rattler-build skips an output by its file name alone, which a changed recipe keeps: an
    lmsforge upgrade that adds a licence file must not get the old package back."""
    digest = hashlib.sha256(json.dumps({"series": identity.series_hash,
                                        "upstream": identity.upstream},
                                       sort_keys=True).encode())
    for root in (recipe_dir, recipes.HARNESS_DIR):
        for path in sorted(p for p in root.rglob("*") if p.is_file()
                           and "__pycache__" not in p.parts):
            digest.update(f"{path.relative_to(root)}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _same_build(recorded: dict, identity: recipes.SeriesIdentity) -> bool:
    upstream_keys = {k: v for k, v in recorded.items() if k.startswith("upstream_")}
    return (recorded.get("series_hash") == identity.series_hash
            and upstream_keys == {f"upstream_{k}": v for k, v in identity.upstream.items()})
