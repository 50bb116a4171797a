"""Private conda channels: read package files, publish to a folder or server, install from them.

Must not build or verify, and never show a credential: every message goes through redact().
"""
