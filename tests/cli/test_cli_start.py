"""The command line starts light and fails in one line: `ldp --help` imports no command module, `ldp CMD --help`
no server client or SciPy, and errors a person can act on print what is wrong and what to run, without a
traceback unless `--debug` (no services needed: the addresses point where nothing listens)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ldpstream.cli.commands import COMMANDS, module_commands
from ldpstream.cli.errors import NotPublished, explain, redacted

SERVER_MODULES = {"faust", "aiokafka", "confluent_kafka", "redis", "aiohttp", "scipy", "prometheus_client", "uvloop"}
LDP = [sys.executable, "-m", "ldpstream"]
NOWHERE = {"KAFKA_BOOTSTRAP": "127.0.0.1:9", "REDIS_URL": "redis://127.0.0.1:9/0"}  # port 9 (discard): closed here


def loaded_after(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter has loaded after running `ldp ARGV` (its exit caught)."""
    code = textwrap.dedent(f"""
        import sys
        from ldpstream.cli.commands import app
        try:
            app({argv!r})
        except SystemExit:
            pass
        print(" ".join(sys.modules), file=sys.stderr)
    """)
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr
    return set(err.splitlines()[-1].split())


def run_ldp(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LDP, *args], capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=60)


@pytest.mark.parametrize("module", sorted({module for module, _ in COMMANDS.values()}))
def test_the_table_lists_each_module_s_commands_with_their_own_help(module: str) -> None:
    real = module_commands(module)
    listed = {name for name, (owner, _) in COMMANDS.items() if owner == module}
    assert set(real) == listed
    for name in listed:
        assert COMMANDS[name][1] == real[name].get_short_help_str(limit=10_000), name


def test_help_imports_no_command_module() -> None:
    loaded = loaded_after(["--help"])
    commands = {f"ldpstream.cli.{module}" for module, _ in COMMANDS.values()}
    assert not loaded & commands
    assert not {m.split(".")[0] for m in loaded} & SERVER_MODULES


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_s_help_loads_no_server_client(command: str) -> None:
    assert not {m.split(".")[0] for m in loaded_after([command, "--help"])} & SERVER_MODULES


def test_every_command_answers_help() -> None:
    for command in COMMANDS:
        answer = run_ldp(command, "--help")
        assert answer.returncode == 0 and "Usage" in answer.stdout, (command, answer.stderr)


def test_a_stopped_stack_is_one_line_that_says_to_run_ldp_up() -> None:
    start = time.monotonic()
    answer = run_ldp("estimate", "diagnostics", env=NOWHERE)
    assert time.monotonic() - start < 30
    assert answer.returncode == 1 and answer.stdout == ""
    assert answer.stderr.count("\n") == 1 and "Traceback" not in answer.stderr
    assert "Kafka at 127.0.0.1:9" in answer.stderr and "`ldp up`" in answer.stderr
    assert "Redis" in run_ldp("tokens", "list", env=NOWHERE).stderr


def test_debug_shows_the_traceback() -> None:
    answer = run_ldp("--debug", "estimate", "diagnostics", env=NOWHERE)
    assert answer.returncode == 1 and "Traceback" in answer.stderr and "CliError" in answer.stderr


def test_a_missing_spec_file_is_one_line(tmp_path: Path) -> None:
    answer = run_ldp("spec", "validate", str(tmp_path / "missing.yaml"))
    assert answer.returncode == 1 and "Traceback" not in answer.stderr + answer.stdout
    assert "missing.yaml" in answer.stderr + answer.stdout


def test_explain_turns_edge_errors_into_what_to_do() -> None:
    assert "ldp spec publish" in str(explain(NotPublished("diagnostics")))
    assert explain(FileNotFoundError(2, "No such file or directory", "x.yaml")) == "x.yaml: no such file or directory"
    assert "ldpstream[server]" in str(explain(ModuleNotFoundError("No module named 'redis'", name="redis")))
    assert explain(KeyError("a bug")) is None  # a bug keeps its traceback
    assert redacted("redis://admin:secret@h:6379/0") == "redis://***@h:6379/0"


def test_kafka_and_redis_errors_name_the_fix() -> None:
    import redis.exceptions
    from confluent_kafka import KafkaError, KafkaException

    assert "`ldp up`" in str(explain(KafkaException(KafkaError(KafkaError._TRANSPORT))))
    assert "credentials" in str(explain(KafkaException(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED))))
    assert "`ldp up`" in str(explain(redis.exceptions.ConnectionError("refused")))
    assert "credentials" in str(explain(redis.exceptions.AuthenticationError("WRONGPASS")))
