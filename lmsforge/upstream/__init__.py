"""Get an upstream tag's tree (git remote, mirror or checked archive) and say exactly what it is.

Must not know about series, levels or packages: every other job starts from the tree it gives.
"""
