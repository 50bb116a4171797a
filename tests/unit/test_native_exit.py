"""The lmsforge program ends without the interpreter's teardown once rattler's native runtimes are
loaded (lmsforge/native_exit.py), and still exits with the command's code, its whole output and
its atexit clean-up."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from lmsforge import __version__

PROGRAM = textwrap.dedent("""\
    import atexit, sys
    atexit.register(lambda: print("clean-up ran", flush=True))
    if {load_native}:
        import rattler, rattler_build  # noqa: F401  (their tokio runtimes are what races teardown)
    sys.argv = ["lmsforge", *{args!r}]
    from lmsforge.cli import run
    run()
    print("not reached")
""")


def _run(args: list[str], *, load_native: bool) -> subprocess.CompletedProcess[str]:
    program = PROGRAM.format(load_native=load_native, args=args)
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120)


def test_a_successful_command_keeps_its_output_code_and_clean_up() -> None:
    for load_native in (False, True):
        done = _run(["--version"], load_native=load_native)
        assert done.returncode == 0, done.stderr
        assert __version__ in done.stdout
        assert done.stdout.rstrip().endswith("clean-up ran")
        assert "not reached" not in done.stdout


def test_a_failing_command_keeps_its_exit_code_and_one_line_error() -> None:
    for load_native in (False, True):
        done = _run(["verify", "-f", "caffe"], load_native=load_native)
        assert done.returncode == 2, (load_native, done.stdout, done.stderr)
        assert "unknown framework `caffe`" in done.stderr
        assert "clean-up ran" in done.stdout


def test_the_installed_program_is_the_one_that_skips_teardown() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "lmsforge"]
    assert script.value == "lmsforge.cli:run"


SIGNALLED_ELSEWHERE = textwrap.dedent("""\
    import signal, socket, threading, time
    from lmsforge import native_exit
    from lmsforge.errors import Terminated
    # Run under nohup (as a CI script may be), the signal comes ignored, and lmsforge rightly
    # leaves an ignored signal ignored: this test is about forwarding one it handles.
    signal.signal(signal.{name}, signal.SIG_DFL)
    native_exit.handle_signals()
    quiet, _ = socket.socketpair()  # nothing is ever sent: a read with no timeout blocks for good
    def deliver_here():
        time.sleep(0.5)  # the main thread is in recv by then
        signal.pthread_kill(threading.get_ident(), signal.{name})
    threading.Thread(target=deliver_here).start()
    start = time.monotonic()
    try:
        quiet.recv(1)
    except Terminated as exc:
        print(f"terminated by {{exc.name}} after {{time.monotonic() - start:.1f}} s", flush=True)
""")


def test_a_signal_that_lands_on_another_thread_still_ends_the_main_thread_at_once() -> None:
    """The kernel hands a process's signal to any thread that does not block it (rattler's tokio
    threads too), and one that lands just before the main thread enters a blocking call is seen
    by no one: Python runs its handler only in the main thread, once that thread next wakes. A
    read that waits for good (a channel server that never answers) then outlived SIGTERM (the CI
    run of 9a1c768, S10). Delivered on purpose to another thread, the signal must still end the
    main thread's wait within seconds."""
    for name in ("SIGTERM", "SIGHUP"):
        try:
            done = subprocess.run([sys.executable, "-c", SIGNALLED_ELSEWHERE.format(name=name)],
                                  capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{name} on another thread left the main thread waiting "
                                 f"(20 s): {exc.stderr!r}") from None
        assert done.stdout.startswith(f"terminated by {name} after "), (done.stdout, done.stderr)
