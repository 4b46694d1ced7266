# SPDX-License-Identifier: Apache-2.0
"""A release is refused before it is published when its index cannot install what it
requires: the kit missing or yanked there, or a requirement by direct reference; an
index that has them lets it through, read as pip reads it (PEP 691 JSON, PEP 503)."""

# Future
from __future__ import annotations

# Standard
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
import json
import threading
import zipfile

# Third Party
import pytest

# First Party
from lmcache_device_kit.index_check import main, problems, releases

KIT_FILES = {
    "lmcache-device-kit": [
        ("lmcache_device_kit-0.1.0-py3-none-any.whl", False),
        ("lmcache_device_kit-0.2.0.tar.gz", False),
        ("lmcache_device_kit-0.2.1-py3-none-any.whl", True),
    ],
    "lmcache": [("lmcache-0.5.6-cp311-cp311-manylinux_2_28_x86_64.whl", False)],
}


class Index(BaseHTTPRequestHandler):
    """A simple API over KIT_FILES: JSON when asked for it (and ``json`` is on), HTML
    otherwise, 404 for a project it does not hold."""

    json = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        project = self.path.strip("/").split("/")[-1]
        if project not in KIT_FILES:
            self.send_error(404)
            return
        files = KIT_FILES[project]
        if self.json and "vnd.pypi.simple.v1+json" in self.headers.get("Accept", ""):
            kind = "application/vnd.pypi.simple.v1+json"
            listed = [{"filename": f, "url": f, "yanked": y} for f, y in files]
            body = json.dumps({"meta": {"api-version": "1.0"}, "files": listed})
        else:
            kind = "text/html"
            links = [
                f'<a href="../../files/{f}#sha256=0"{" data-yanked" if y else ""}>'
                f"{f}</a>"
                for f, y in files
            ]
            body = "<html><body>" + "".join(links) + "</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(params=["json", "html"])
def index(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("Handler", (Index,), {"json": request.param == "json"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()
    server.server_close()


def wheel(tmp_path: Path, *requires: str) -> Path:
    path = tmp_path / "lmcache_bar_device-0.1.0-py3-none-any.whl"
    lines = ["Metadata-Version: 2.4", "Name: lmcache-bar-device", "Version: 0.1.0"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w") as archive:
        info = "lmcache_bar_device-0.1.0.dist-info"
        archive.writestr(f"{info}/METADATA", "\n".join(lines) + "\n")
    return path


def test_releases_are_read_from_either_api_yanked_ones_aside(index: str) -> None:
    assert [str(v) for v in releases(index, "LMCache_Device.Kit")] == ["0.1.0", "0.2.0"]
    assert releases(index, "not-there") == []


def test_a_wheel_whose_requirements_the_index_holds_passes(
    index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = wheel(
        tmp_path,
        "lmcache<=0.5.6,>=0.5.4",
        "lmcache-device-kit<0.3,>=0.2.0",
        'pytest>=8; extra == "test"',
        "tomli; python_version < '3.0'",
    )
    assert problems(built, index) == []
    assert main(["--index", index, str(built)]) == 0
    assert "index check OK" in capsys.readouterr().out


def test_a_kit_the_index_lacks_or_has_only_yanked_is_refused_with_the_fix(
    index: str, tmp_path: Path
) -> None:
    """0.2.1 is yanked there: a wheel that needs it strands its users."""
    (found,) = problems(wheel(tmp_path, "lmcache-device-kit<0.3,>=0.2.1"), index)
    assert "requires lmcache-device-kit<0.3,>=0.2.1, which" in found
    assert "cannot satisfy (it has 0.1.0, 0.2.0): every user's pip install" in found
    assert "Publish the kit there first" in found and "tag kit-v0.2.1" in found
    (other,) = problems(wheel(tmp_path, "vendor-runtime>=1"), index)
    assert "vendor-runtime>=1" in other and "(it has no release)" in other


def test_a_requirement_by_direct_reference_is_refused(
    index: str, tmp_path: Path
) -> None:
    git = "lmcache-device-kit@ git+https://example.com/t.git@abc#subdirectory=kit"
    (found,) = problems(wheel(tmp_path, git), index)
    assert "by direct reference: an index refuses such a wheel" in found


def test_an_index_that_does_not_answer_fails_the_check_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    built = wheel(tmp_path, "lmcache-device-kit<0.3,>=0.2.0")
    assert main(["--index", "http://127.0.0.1:9/simple/", str(built)]) == 2
    assert (
        "index check: cannot read http://127.0.0.1:9/simple/" in capsys.readouterr().err
    )
