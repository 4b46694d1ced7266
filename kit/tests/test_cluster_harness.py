# SPDX-License-Identifier: Apache-2.0
"""The cluster harness's own parts: L2 adapters on a server's command line, the real
Redis a ``resp`` L2 runs against (started, killed and restarted on its port), the
coordinator P2P servers find each other through."""

# Future
from __future__ import annotations

# Standard
from pathlib import Path
import json
import socket

# Third Party
import pytest

# First Party
from lmcache_device_kit.harness import coordinator, redis, servers


def test_l2_adapters_become_one_l2_adapter_flag_each_in_order(tmp_path: Path) -> None:
    adapters = [
        {"type": "fs", "base_path": str(tmp_path / "l2")},
        {"type": "resp", "host": "127.0.0.1", "port": 6399},
    ]
    server = servers.LMCacheServer(
        tmp_path / "server.log", "engine_driven", l2_adapters=adapters
    )
    flags = [i for i, arg in enumerate(server.argv) if arg == "--l2-adapter"]
    assert [json.loads(server.argv[i + 1]) for i in flags] == adapters


def command(port: int, *words: str) -> bytes:
    """One RESP command's raw reply from the Redis on ``port``."""
    request = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request.encode())
        return sock.recv(256)


def test_redis_answers_then_a_kill_loses_its_data_and_a_restart_serves_the_same_port(
    tmp_path: Path,
) -> None:
    """The fault tests kill Redis under the servers and bring it back where they
    expect it: empty (no persistence), on the same port."""
    server = redis.RedisServer(tmp_path / "redis.log")
    with server:
        assert redis.ping(server.port)
        assert server.adapter == {
            "type": "resp",
            "host": "127.0.0.1",
            "port": server.port,
        }
        assert command(server.port, "SET", "k", "v") == b"+OK\r\n"
        server.kill()
        assert not redis.ping(server.port)
        port = server.port
        server.restart()
        assert server.port == port and redis.ping(port)
        assert command(port, "EXISTS", "k") == b":0\r\n"
    assert not redis.ping(server.port)
    assert server.process is not None and server.process.returncode == 0


def test_without_a_redis_binary_the_error_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(redis, "find_spec", lambda name: None)
    monkeypatch.delenv(redis.ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"lmcache-device-kit\[cluster\]"):
        redis.find_binary()
    monkeypatch.setenv(redis.ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="REDIS_SERVER=.*not an executable"):
        redis.find_binary()


def test_a_frozen_redis_answers_nothing_until_it_thaws_and_stops_cleanly_frozen(
    tmp_path: Path,
) -> None:
    """The fault tests freeze Redis under the servers (SIGSTOP), then thaw or kill
    it; a test that fails while it is frozen still stops it by SIGTERM."""
    server = redis.RedisServer(tmp_path / "redis.log")
    with server:
        server.freeze()
        assert not redis.ping(server.port, timeout=0.3)
        server.thaw()
        assert redis.ping(server.port)
        server.freeze()
    assert server.process is not None and server.process.returncode == 0


def test_redis_commands_round_trip_binary_values_and_list_keys(tmp_path: Path) -> None:
    """What a fault test reads and rewrites in the L2: any bytes, at any length."""
    value = bytes(range(256)) * 3 + b"\r\n$-1\r\n"
    with redis.RedisServer(tmp_path / "redis.log") as server:
        assert redis.command(server.port, "SET", "k@0", value) == "OK"
        assert redis.command(server.port, "GET", "k@0") == value
        assert redis.command(server.port, "GET", "missing") is None
        assert redis.command(server.port, "EXISTS", "k@0") == 1
        assert server.keys() == {b"k@0"}
        with pytest.raises(RuntimeError, match="redis: ERR"):
            redis.command(server.port, "NOSUCHCOMMAND")


def test_a_coordinator_answers_lists_no_server_yet_and_stops_by_pid(
    tmp_path: Path,
) -> None:
    with coordinator.Coordinator(tmp_path / "coordinator.log") as running:
        assert running.instances() == []
        flags = running.server_args("nixl")
    assert running.process is not None and running.process.poll() is not None
    server = servers.LMCacheServer(
        tmp_path / "server.log", "engine_driven", extra_args=flags
    )
    at = server.argv.index
    assert server.argv[at("--coordinator-url") + 1] == running.url
    assert server.argv[at("--coordinator-advertise-ip") + 1] == "127.0.0.1"
    assert server.argv[at("--p2p-transfer-engine") + 1] == "nixl"


def test_without_the_transfer_engine_the_skip_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(coordinator, "find_spec", lambda name: None)
    reason = coordinator.missing_engine("nixl")
    assert reason is not None and "lmcache-device-kit[p2p]" in reason
    monkeypatch.setattr(coordinator, "find_spec", lambda name: name == "nixl_cu12")
    assert coordinator.missing_engine("nixl") is None
