"""`lmsforge build`: fetch → apply → verify apply → render → rattler-build → audit."""

from __future__ import annotations

from pathlib import Path

from lmsforge import build, frameworks, recipes, series as series_mod, ui, upstream
from lmsforge.commands.packaging import series_identity
from lmsforge.options import Options
from lmsforge.verify import apply_level


def run(opts: Options, framework: str, tag: str, profile: str, platform: str,
        variant_args: list[str], channel: Path, fetch_kwargs: dict[str, object]) -> int:
    sources = frameworks.sources_for(opts.patches_dir, framework)
    series = series_mod.load(frameworks.series_folder(opts.patches_dir, sources, tag))
    variants = recipes.parse_variant_args(variant_args)
    with ui.step(f"fetching {framework} {tag}"):
        tree_identity = upstream.fetch(sources, tag, opts.cache, **fetch_kwargs)  # type: ignore
    identity = series_identity(opts, framework, tag, tree_identity)
    tree_path = opts.cache.root / "trees" / framework / tag
    with opts.cache.lock(f"tree-{framework}-{tag}"):
        with ui.step("applying and verifying the series (level apply)"):
            level = apply_level.run(tree_path, tree_identity, series)
        build.check_verified(framework, tag, level.status, level.detail)
        recipe_dir = opts.cache.build_dir(framework, tag, f"recipe-{profile}-{platform}")
        rendered = recipes.render(framework, tag, profile, platform, recipe_dir,
                                  series=identity, source_tree=tree_path, variants=variants)
        results = []
        for combination in rendered.matrix:
            label = ", ".join(f"{k}={v}" for k, v in combination.items()) or "default"
            with ui.step(f"rattler-build {framework} {tag} {profile} [{label}] for {platform}"):
                results.append(build.build_variant(
                    rendered, combination, channel, jobs=opts.jobs,
                    log_file=opts.cache.build_dir(framework, tag, "logs") / "rattler-build.log"))
    for result in results:
        for package in result.packages:
            ui.out.print(f"built {package.subdir}/{package.path.name} "
                         f"({package.size / 1e6:.1f} MB) in {result.seconds:.0f} s")
        for line in result.audit:
            ui.out.print(f"  audit: {line}")
    ui.out.print(f"local channel: {channel.resolve()} (series hash {identity.series_hash[:12]}, "
                 f"upstream {tree_identity.kind} {tree_identity.sha256 or tree_identity.commit})")
    return 0
