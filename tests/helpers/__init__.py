"""Plain helpers shared by test modules, one module per topic; fixtures live in the conftest.py of
the folder that uses them.

Tests import them as ``from helpers.<topic> import ...``: ``tests/`` is on ``sys.path`` because
pytest (in its default ``prepend`` import mode) inserts the folder of the rootmost
``tests/conftest.py``.
"""
