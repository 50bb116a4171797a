"""PyTorch's `compile` level beyond c10: torchgen and the translation units the series touches.

``guards`` checks that every generated CUDA wrapper taking tensors declares the LMS pin guard,
``torchgen`` regenerates the CUDA registrations of a tree, ``inputs`` fetches the library headers
(pybind11, Python, cuDNN/cuBLAS/... from PyPI wheels into the lmsforge cache) and ``units``
syntax-compiles the touched translation units and byte-compiles the touched Python files.
"""
