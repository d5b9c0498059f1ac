"""What the tests share: helpers, test data and the few fixtures used from several folders.

Test modules import from here (``from tests.support.sweep_data import LAB_4RPS``), never
from one another; fixtures that every folder may ask for are registered in
``tests/conftest.py`` (``pytest_plugins``), those of one folder live in its ``conftest.py``.
"""
