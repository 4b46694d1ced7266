# SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("# " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}"""Declares the native ops extension; all other metadata lives in pyproject.toml.

The package's ``_kernels`` is compiled from ``_kernels.cpp`` and ``_recorders.cpp``
with torch's C++ extension tooling, so it is built for one torch's C++ ABI: the one
pyproject.toml's dependencies pin, which the wheel then requires. The build refuses
any other torch (``PinnedTorchBuild``). An isolated build installs the pinned torch
([build-system] requires it: cibuildwheel builds so); to use the torch installed
here, build without isolation:

    python -m build --wheel --no-isolation

(Without the pin, pip would install whatever torch it resolves into the build
environment, often a multi-GB CUDA build that does not match yours.)

Your part is ``vendor_build``: what your kernels need of your toolchain.
"""

# Standard
from pathlib import Path
import importlib.util
import os
import re

# Third Party
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension
import torch

#: ``torch==X`` as pyproject.toml's dependencies spell the pin.
TORCH_PIN = re.compile(r"torch\s*==\s*([\w.]+)")
#: Your SDK's root (its ``include/`` and ``lib64/``), when the build has one.
SDK_ENV_VAR = "{{ cookiecutter.device_name | upper }}_SDK_HOME"
#: The module of your torch extension ("": torch has the device built in).
TORCH_EXTENSION_MODULE = "{{ cookiecutter.torch_extension_module }}"


def vendor_build() -> dict[str, list[str]]:
    """What the kernels need of your toolchain, as CppExtension arguments: your
    SDK's headers and libraries, and your torch extension's libraries (linked with
    an rpath to where they are installed). The compiler is the environment's
    ``CXX`` (your vendor's, e.g. for CANN's or MACA's kernels).

    TODO(vendor): your SDK's libraries (e.g. ``ascendcl`` for CANN) and your torch
    extension's (e.g. ``torch_npu``); CI and cibuildwheel set SDK_ENV_VAR and CXX on
    your image (pyproject.toml's [tool.cibuildwheel]). The sample's kernels run on
    the CPU emulator and need none of them.
    """
    build: dict[str, list[str]] = {"include_dirs": [], "library_dirs": []}
    build |= {"libraries": [], "runtime_library_dirs": []}
    sdk = os.environ.get(SDK_ENV_VAR)
    if sdk:
        build["include_dirs"].append(str(Path(sdk) / "include"))
        build["library_dirs"].append(str(Path(sdk) / "lib64"))
    module = TORCH_EXTENSION_MODULE
    origin = getattr(module and importlib.util.find_spec(module), "origin", None)
    libraries = Path(origin).parent / "lib" if origin else None
    if libraries and libraries.is_dir():
        build["library_dirs"].append(str(libraries))
        build["runtime_library_dirs"].append(str(libraries))
    return build


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
            **vendor_build(),
        )
    ],
    cmdclass={"build_ext": PinnedTorchBuild},
)
