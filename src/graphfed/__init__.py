"""graphfed: federated graph learning on real PyG datasets, in-process or on Flower.

Importing graphfed puts Intel MKL (PyTorch's CPU BLAS on x86) in strict Conditional Numerical
Reproducibility mode, unless ``MKL_CBWR`` is already set. Otherwise MKL's GEMM gives the inner
dimension of a product with a small output (a weight gradient summed over a client's nodes) to
several threads, and the last bits of a run depend on the thread count. In strict mode MKL's
``?gemm`` gives the same bits whatever the thread count (oneMKL developer guide, "Reproducibility
Conditions"). MKL reads the variable at its first call, so this holds when graphfed is imported
before any computation. See docs/performance.md, "The same numbers whatever the thread count".
"""

import os

os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
