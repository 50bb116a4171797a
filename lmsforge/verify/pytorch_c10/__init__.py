"""Build PyTorch's c10 / c10_cuda and the LMS googletest programs outside PyTorch's own build.

``CMakeLists.txt`` here is the build description; ``inputs`` finds what it needs, ``build``
configures and builds a tree, ``gtest`` runs a test program and reads its JSON report.
"""
