"""A mistyped command or collection name gets a "did you mean"."""

from __future__ import annotations

from typer.testing import CliRunner

from ldpstream.cli.commands import app
from ldpstream.cli.errors import NotPublished, nearest

runner = CliRunner()


def test_a_mistyped_command_gets_the_nearest_ones() -> None:
    for argv, meant in ((["estimat"], "'estimate'"), (["spec", "publsh"], "'publish'"),
                        (["tokens", "creat"], "'create'")):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2 and "Did you mean" in result.output and meant in result.output, result.output


def test_an_unknown_collection_names_the_published_ones_it_may_mean() -> None:
    demos = ["diagnostics-demo-20261201-100000", "diagnostics-demo-20261201-110000", "request_latency"]
    message = str(NotPublished("diagnostics", published=demos))
    assert "did you mean diagnostics-demo-20261201-110000 or diagnostics-demo-20261201-100000?" in message
    assert "ldp spec publish" in message
    assert nearest("request_latncy", demos) == ["request_latency"]
    assert "did you mean" not in str(NotPublished("weather", published=demos))
    assert "did you mean" not in str(NotPublished("request_latency", version=9, published=demos))
