"""Verification levels (``verification.md``): apply, compile, core-cpu, core-gpu, full."""
