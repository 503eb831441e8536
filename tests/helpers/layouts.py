"""The command lines of the tests that compare layouts (hosted against processes), and the pin
that keeps each comparison on one device.

`device=auto` takes the GPU only with one per process (experiments/runtime.auto_device): on a
machine with one GPU a hosted run lands on the GPU and a 2-process run on the CPU, and a
bit-for-bit comparison of the two fails at step 0 with no bug in either. Every test that
compares layouts through run.py pins the device (`ONE_DEVICE`) and registers its command lines
here; tests/test_layout_devices.py resolves them for 0 to 8 GPUs and checks that each
comparison stays on one device. The in-process harnesses pass "cpu" to init_world themselves.
"""
from __future__ import annotations

ONE_DEVICE = "device=cpu"

# test name -> the comparisons it makes, each a list of command lines (one per layout).
COMPARED_LAYOUTS: dict[str, list[list[list[str]]]] = {}
