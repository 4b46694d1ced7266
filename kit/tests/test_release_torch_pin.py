# SPDX-License-Identifier: Apache-2.0
"""A native wheel's load-time torch check (``compat.release.native_torch_problem``):
its ops load only with the torch their module is compiled against."""

# Future
from __future__ import annotations

# Standard
from pathlib import Path

# Third Party
from conftest import in_lmcache

METADATA = """\
Metadata-Version: 2.4
Name: lmcache-bar-device
Version: 0.1.0
Requires-Dist: lmcache<=0.5.6,>=0.5.4
Requires-Dist: torch==2.13.0
Requires-Dist: pytest; extra == "test"
"""


def test_native_ops_load_only_with_the_pinned_torch_else_say_which_to_install(
    tmp_path: Path,
) -> None:
    """A local build tag (+cpu) is the same torch; another version is refused with the
    pip command that installs the pinned one; a project that pins no torch, or is
    not installed (a source checkout), has nothing to check."""
    info = tmp_path / "lmcache_bar_device-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(METADATA)
    pure = tmp_path / "lmcache_baz_device-0.1.0.dist-info"
    pure.mkdir()
    (pure / "METADATA").write_text(METADATA.replace("bar", "baz").replace("torch", "x"))
    found = in_lmcache(
        """
        import json
        from lmcache_device_kit.compat.release import native_torch_problem as problem
        print(json.dumps([
            problem("lmcache-bar-device", "2.13.0+cpu"),
            problem("lmcache-bar-device", "2.14.1"),
            problem("lmcache-baz-device", "2.14.1"),
            problem("lmcache-not-installed", "2.14.1"),
        ]))
        """,
        tmp_path,
    )
    assert found == [
        "",
        "lmcache-bar-device's native ops are built against torch 2.13.0, but torch "
        "2.14.1 is installed. Install the torch this wheel requires (pip install "
        "'torch==2.13.0'), or a build of lmcache-bar-device for torch 2.14.1 "
        "(README.md, 'Releasing').",
        "",
        "",
    ]


def test_native_ops_load_only_with_the_pinned_torch_extension_else_say_which(
    tmp_path: Path,
) -> None:
    """A wheel that pins its vendor's torch extension (the native ops link its C++
    libraries) refuses another release of it, with the pip command that installs
    the pinned one; a local build tag is the same release; an extension the wheel
    does not pin, or no extension, has nothing to check."""
    info = tmp_path / "lmcache_bar_device-0.1.0.dist-info"
    info.mkdir()
    pinned = METADATA + "Requires-Dist: torch_fooext==1.2.0\n"
    (info / "METADATA").write_text(pinned)
    for version in ("1.3.0", "1.2.0+cpu"):
        extension = tmp_path / version / "torch_fooext-1.0.dist-info"
        extension.mkdir(parents=True)
        meta = f"Metadata-Version: 2.4\nName: torch-fooext\nVersion: {version}\n"
        (extension / "METADATA").write_text(meta)
        (extension / "top_level.txt").write_text("torch_fooext\n")
    program = """
        import json, sys
        sys.path.insert(0, {where!r})
        from lmcache_device_kit.compat import release
        problem = release.native_extension_problem
        print(json.dumps([problem("lmcache-bar-device", "torch_fooext"),
                          problem("lmcache-bar-device", "torch_other"),
                          problem("lmcache-bar-device", "")]))
        """
    newer = in_lmcache(program.format(where=str(tmp_path / "1.3.0")), tmp_path)
    same = in_lmcache(program.format(where=str(tmp_path / "1.2.0+cpu")), tmp_path)
    assert newer == [
        "lmcache-bar-device's native ops are built against torch-fooext 1.2.0, but "
        "torch-fooext 1.3.0 is installed. Install the release this wheel requires "
        "(pip install 'torch-fooext==1.2.0'), or a build of lmcache-bar-device for "
        "torch-fooext 1.3.0 (README.md, 'Releasing').",
        "",
        "",
    ]
    assert same == ["", "", ""]
