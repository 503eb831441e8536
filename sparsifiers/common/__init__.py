"""What the methods share: the protocol every method implements (`base.py`), the capabilities
some implement (`capabilities.py`), the exchange kinds (`exchange_kinds.py`), the flat buffer's
layout, the workspace, the selection kernels, the threshold controller and start, DEFT's
allocation. It imports no method: sparsifiers/<method>.py builds on it, sparsifiers/registry.py
names the methods."""
