
import pytest



@pytest.fixture
def fresh_plugins():
    """A clean process-wide plugin host before and after the test."""
    import opzoo

    opzoo.reset_plugins()
    yield
    opzoo.reset_plugins()
