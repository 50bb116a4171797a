"""The child process that runs one rattler-build build, so that the parent stays responsive
while it runs: ``python -m lmsforge.packaging.build_child CALL``.

py-rattler-build holds the GIL for the whole build (minutes, hours for `full`). In the parent,
neither a signal handler nor the heartbeat thread could run meanwhile: Ctrl-C and SIGTERM waited
for the build to end, and a build said nothing for minutes. Here the parent only reads lines.

CALL is JSON: ``{"recipe": path, "variants": {key: [value]}, "platform": ..., "output_dir": ...,
"channels": [...], "isolation": "none" | "strict"}``. Every log line rattler-build reports (the
build script's output among them) is one line on stdout. The last line is ``RESULT_MARKER`` and
the JSON list of the packages built; a failure ends with exit 1 and one line that starts with
``ERROR_MARKER``.
"""

from __future__ import annotations

import json
import os
import sys

RESULT_MARKER = "lmsforge-build-result: "
ERROR_MARKER = "lmsforge-build-error: "


class _LinesOut:
    """rattler-build's progress as plain lines on stdout (flushed: the parent shows them live)."""

    def _say(self, text: str) -> None:
        for line in str(text).splitlines():
            if line.strip():
                sys.stdout.write(line.rstrip() + "\n")
        sys.stdout.flush()

    def on_build_step(self, event) -> None:
        self._say(f"[{event.step_name}] {event.message}")

    def on_log(self, event) -> None:
        self._say(event.message if event.level == "info" else f"{event.level}: {event.message}")

    def on_download_start(self, event) -> None:
        self._say(f"downloading {event.url}")

    def on_download_progress(self, event) -> None:
        pass  # one line per download is enough for a log

    def on_download_complete(self, event) -> None:
        pass


def build(call: dict) -> list[str]:
    import rattler_build as rb

    platform = rb.PlatformConfig(target_platform=call["platform"])
    recipe = rb.Stage0Recipe.from_file(call["recipe"])
    variants = recipe.render(rb.VariantConfig(call["variants"]), rb.RenderConfig(platform=platform))
    isolation = (rb.EnvironmentIsolation.NONE if call["isolation"] == "none"
                 else rb.EnvironmentIsolation.STRICT)
    packages: list[str] = []
    for variant in variants:
        # An output already built into this folder (the parent keeps one folder per series and
        # upstream tree) is not built again: libtorch once for every Python of a full build.
        tools = rb.ToolConfiguration(test_strategy="skip", skip_existing="local")
        result = variant.run_build(output_dir=call["output_dir"], channels=call["channels"],
                                   tool_config=tools, env_isolation=isolation,
                                   progress_callback=_LinesOut())
        packages.extend(str(p) for p in result.packages)
    return packages


def main(argv: list[str]) -> None:
    try:
        packages = build(json.loads(argv[1]))
    except BaseException as exc:  # whatever the build raises is the parent's to report
        text = " ".join(str(exc).split()) or repr(exc)
        sys.stdout.write(f"\n{ERROR_MARKER}{text}\n")
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.write(f"{RESULT_MARKER}{json.dumps(packages)}\n")
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown with rattler's runtime loaded (native_exit)


if __name__ == "__main__":
    main(sys.argv)
