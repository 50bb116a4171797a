"""`lmsforge render`: the rattler-build recipe and the variant matrix, without building."""

from __future__ import annotations

from pathlib import Path

from lmsforge import ui
from lmsforge.options import Options
from lmsforge.packaging import recipes, toolchain
from lmsforge.packaging.identity import series_identity


def run(opts: Options, framework: str, tag: str, profile: str, platforms: list[str],
        variant_args: list[str], out_dir: Path | None, as_json: bool) -> int:
    identity = series_identity(opts, framework, tag)
    variants = recipes.parse_variant_args(variant_args)
    results = []
    for platform in platforms:
        folder = (out_dir or opts.cache.root / "recipes") / framework / tag / profile / platform
        glibc = toolchain.glibc_for(platform) if profile == "core" else None
        results.append(recipes.render(framework, tag, profile, platform, folder,
                                      series=identity, variants=variants,
                                      build_facts={"glibc": glibc} if glibc else None))
    if as_json:
        ui.print_json([{"platform": r.platform, "recipe": str(r.recipe_file),
                        "matrix": list(r.matrix),
                        "outputs": [[f"{o.name}-{o.version}-{o.build_string}" for o in outs]
                                    for outs in r.outputs]} for r in results])
        return 0
    for result in results:
        rows = [[", ".join(f"{k}={v}" for k, v in combo.items()),
                 "\n".join(f"{o.name}-{o.version}-{o.build_string}" for o in outs)]
                for combo, outs in zip(result.matrix, result.outputs)]
        ui.table(f"{framework} {tag} {profile} on {result.platform}: {len(rows)} builds "
                 f"(recipe {result.recipe_file})", ["variant", "packages"], rows)
    return 0
