"""The child process that runs one py-rattler-build upload, so that the parent can still handle
SIGTERM while it runs: ``python -m lmsforge.channel.upload_child CALL``.

py-rattler-build's uploaders hold the GIL until the upload ends: in the parent, neither a signal
handler nor a thread could run meanwhile, so SIGTERM would wait for the upload, or end the process
without removing the private auth file. The parent ends this child (``native_exit.end_children``)
before it removes the auth file.

CALL is JSON: ``{"function": name in rattler_build, "args": [...], "kwargs": {...}}``. A failure
ends with exit 1 and one line on stderr that starts with ``ERROR_MARKER``.
"""

from __future__ import annotations

import json
import os
import sys

ERROR_MARKER = "lmsforge-upload-error: "


def main(argv: list[str]) -> None:
    call = json.loads(argv[1])
    try:
        import rattler_build

        getattr(rattler_build, call["function"])(*call["args"], **call["kwargs"])
    except BaseException as exc:  # whatever the uploader raises is the parent's one line
        text = " ".join(str(exc).split()) or repr(exc)
        sys.stderr.write(f"\n{ERROR_MARKER}{text}\n")
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)  # no interpreter teardown with rattler's runtime loaded (native_exit)


if __name__ == "__main__":
    main(sys.argv)
