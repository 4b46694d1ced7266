# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.template ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Declares the native ops extension; all other metadata lives in pyproject.toml.

The package's ``_kernels`` is compiled from ``_kernels.cpp`` and ``_recorders.cpp``
with torch's C++ extension tooling, so it is built for one torch's C++ ABI: the one
pyproject.toml's dependencies pin, which the wheel then requires. The build refuses
any other torch (``PinnedTorchBuild``). An isolated build installs the pinned torch
([build-system] requires it: cibuildwheel builds so); to use the torch installed
here, build without isolation:

    python -m build --wheel --no-isolation

(Without the pin, pip would install whatever torch it resolves into the build
environment, often a multi-GB CUDA build that does not match yours.)
"""

# Standard
import re

# Third Party
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension
import torch

#: ``torch==X`` as pyproject.toml's dependencies spell the pin.
TORCH_PIN = re.compile(r"torch\s*==\s*([\w.]+)")


class PinnedTorchBuild(BuildExtension):
    """torch's extension build, refused unless this torch is the one the wheel pins."""

    def run(self) -> None:
        requires = self.distribution.install_requires or []
        pins = [m.group(1) for r in requires if (m := TORCH_PIN.fullmatch(str(r)))]
        building = torch.__version__.split("+")[0]
        if pins != [building]:
            raise SystemExit(
                f"the native ops would be built against torch {building}, but "
                f"pyproject.toml pins {pins or 'no torch'} in [project] dependencies: "
                "the wheel must require the torch its module is built for. Build with "
                f"that torch (pip install 'torch=={pins[0] if pins else building}', "
                "then --no-isolation), or change both pins in pyproject.toml "
                "(dependencies and [build-system] requires) to the torch you deploy."
            )
        super().run()


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
    cmdclass={"build_ext": PinnedTorchBuild},
)
