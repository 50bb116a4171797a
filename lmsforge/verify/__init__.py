"""Verification levels (``verification.md``): apply, compile, core-cpu, core-sim, core-gpu,
full."""
