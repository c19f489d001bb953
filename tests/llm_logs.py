"""llm's own logs.db, as a user who has run llm before has it: migrated once per session and
copied into each test's llm user directory.

``llm prompt`` migrates logs.db before anything else, and a new one takes dozens of schema steps,
each a commit (0.5-1 s per test on a loaded machine). That is llm's work, not what a test of the
plugin is about. A test module opts in by importing the fixture::

    from llm_logs import existing_logs_db  # noqa: F401  (autouse)

Modules that test what a first run creates, or that run llm processes which must migrate for
themselves, do not import it.
"""

import shutil

import pytest
import sqlite_utils
from llm.migrations import migrate


_MIGRATED = {}  # the session's migrated logs.db (one per xdist worker)


@pytest.fixture(autouse=True)
def existing_logs_db(user_path, tmp_path_factory):
    if "path" not in _MIGRATED:
        path = tmp_path_factory.mktemp("llm-logs") / "logs.db"
        db = sqlite_utils.Database(path)
        migrate(db)
        db.close()
        _MIGRATED["path"] = path
    shutil.copy(_MIGRATED["path"], user_path / "logs.db")
