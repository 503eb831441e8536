"""env.json's device section names what makes float results differ between machines running
the same code and versions: the CPU model, torch's CPU capability, the BLAS and oneDNN builds."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from experiments.engine.launcher.environment import _device_description, cpu_model, math_libraries

MKL_BUILD = """PyTorch built with:
  - GCC 13.3
  - Intel(R) oneAPI Math Kernel Library Version 2024.2-Product Build 20240605 for Intel(R) 64 architecture applications
  - Intel(R) MKL-DNN v3.12.0 (Git Hash 80afa71049cd69a3df32adcccb623b12cd7baa22)
  - CPU capability usage: AVX512
  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, LAPACK_INFO=mkl, USE_MKLDNN=ON,
"""
OPENBLAS_BUILD = """PyTorch built with:
  - GCC 11.2
  - OpenBLAS 0.3.27
  - Build settings: BLAS_INFO=open, BUILD_TYPE=Release, USE_MKLDNN=OFF,
"""


@pytest.mark.parametrize("build, expected", [
    (MKL_BUILD, {"blas": "mkl", "blas_version": "2024.2", "onednn": "v3.12.0"}),
    (OPENBLAS_BUILD, {"blas": "open", "blas_version": "0.3.27", "onednn": None}),
    ("", {"blas": None, "blas_version": None, "onednn": None}),  # an unknown build: nothing made up
])
def test_math_libraries_are_read_from_torchs_build_description(build, expected):
    assert math_libraries(build) == expected


def test_the_device_section_records_this_machines_cpu_kernels_and_libraries():
    device = _device_description()
    assert device["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert device["cpu_capability"] in torch.__config__.show()  # "CPU capability usage: <it>"
    assert {**device, **math_libraries(torch.__config__.show())} == device
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        assert device["cpu_model"] == cpu_model() == (names[0] if names else cpu_model())


def test_the_gpu_section_names_the_gpu_or_is_none_everywhere_without_one():
    from types import SimpleNamespace

    from experiments.engine.launcher.environment import GPU_KEYS, gpu_description

    assert gpu_description(cuda_available=False) == dict.fromkeys(GPU_KEYS)
    h200 = SimpleNamespace(name="NVIDIA H200", major=9, minor=0)
    gpu = gpu_description(cuda_available=True, properties=h200, driver="580.159")
    assert (gpu["name"], gpu["capability"], gpu["driver"], gpu["cuda"]) == ("NVIDIA H200", "9.0", "580.159", torch.version.cuda)
    assert set(gpu) == set(GPU_KEYS)
    device = _device_description()
    assert set(device["gpu"]) == set(GPU_KEYS)
    if not torch.cuda.is_available():
        assert device["gpu"] == dict.fromkeys(GPU_KEYS)
    else:
        assert device["gpu"]["name"] == torch.cuda.get_device_name(0)
