"""The one error type users see, and the exit codes of every command (``forge.md``)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the thing checked failed: a test, a build, a verification level
EXIT_USAGE = 2  # bad usage or bad input: unknown tag, corrupt patch, dirty work tree, ...
EXIT_STOPPED = 3  # stopped for the user: a port conflict to resolve


class LmsforgeError(Exception):
    """A failure with a one-line message that says what went wrong and what to do."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(LmsforgeError):
    """Bad input from the user (exit code 2)."""

    exit_code = EXIT_USAGE


class CheckFailed(LmsforgeError):
    """The thing being checked failed (exit code 1)."""

    exit_code = EXIT_FAILED


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (``kill``, ``timeout``, a cancelled CI job, a closed terminal): raised
    in the main thread like Ctrl-C's KeyboardInterrupt, so the same clean-up runs."""

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.signum = signum
        self.name = name
