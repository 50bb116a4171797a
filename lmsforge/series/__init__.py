"""Hold a series: its manifest and patch files, work trees, exports, parity, which series exist.

Must not build, verify or port: it reads, applies and writes series; trees come from upstream/.
"""
