"""What ``nightly run`` prints around an interruption: no stacks from libraries that log it first."""

from __future__ import annotations

import sqlite3

import pytest
import sqlalchemy as sa
from dagster._core.errors import DagsterExecutionInterruptedError

from pipelines.cli.run_console import interruptions_unlogged


def _engine(raised: BaseException) -> sa.Engine:
    class Closing(sqlite3.Connection):
        def close(self) -> None:
            super().close()
            raise raised

    return sa.create_engine("sqlite://", creator=lambda: sqlite3.connect(":memory:", factory=Closing),
                            poolclass=sa.pool.NullPool)


def test_an_interrupt_landing_while_the_pool_closes_a_connection_prints_no_stack(capsys):
    engine = _engine(DagsterExecutionInterruptedError())
    with interruptions_unlogged():
        connection = engine.connect()
        with pytest.raises(DagsterExecutionInterruptedError):  # still raised: the night stops as before
            connection.close()
    assert capsys.readouterr().err == ""


def test_any_other_error_closing_a_connection_still_prints(capsys):
    engine = _engine(OSError("disk gone"))
    with interruptions_unlogged():
        engine.connect().close()
    err = capsys.readouterr().err
    assert "Exception closing connection" in err and "OSError: disk gone" in err


def test_the_loggers_are_as_before_after_the_block():
    import logging

    logger = logging.getLogger("sqlalchemy")
    before = (list(logger.handlers), logger.propagate)
    with interruptions_unlogged():
        assert logger.propagate is False
    assert (list(logger.handlers), logger.propagate) == before
