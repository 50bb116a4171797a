"""Prove a series in levels (apply, compile, core-cpu, core-sim, core-gpu): harnesses, reports.

Must not import frameworks/ or anything above it: a framework's level runner is handed in.
"""
