
import pytest


@pytest.fixture
def fresh_plugins():
    """A clean process-wide plugin host before and after the test."""
    import opzoo

    opzoo.reset_plugins()
    yield
    opzoo.reset_plugins()


def pytest_configure(config):
    """The preset index (opzoo.cli.preset_index) of this session's CLI processes lives in a temporary directory."""
    import os
    import tempfile

    os.environ.setdefault("OPZOO_CACHE_DIR", tempfile.mkdtemp(prefix="opzoo-test-cache-"))
