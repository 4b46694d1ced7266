# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Declares the native ops extension; all other metadata lives in pyproject.toml.

The package's ``_kernels`` is compiled from ``_kernels.cpp`` and ``_recorders.cpp``
with torch's C++ extension tooling, so it must be built against the exact torch it
will run with. Build in an environment that has that torch, without build isolation:

    python -m build --wheel --no-isolation

(With isolation, pip would install whatever torch it resolves into the build
environment, often a multi-GB CUDA build that does not match yours.)
"""

# Third Party
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(
    ext_modules=[
        CppExtension(
            "{{ cookiecutter.import_package }}._kernels",
            [
                "src/{{ cookiecutter.import_package }}/_kernels.cpp",
                "src/{{ cookiecutter.import_package }}/_recorders.cpp",
            ],
            extra_compile_args=["-O3", "-g0"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
