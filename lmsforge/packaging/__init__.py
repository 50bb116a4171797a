"""Turn a verified series into conda packages: recipes, variants, toolchains, rattler-build, audits.

Must not publish or pick channels: it writes packages into the output folder it is given.
"""
