"""Carry a series from one upstream tag to another: the resumable port state machine, its report.

Must not verify or build: a port ends with a series in patches/, which verify/ then checks.
"""
