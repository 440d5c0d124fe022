"""What the tests share besides fixtures (those stay in the conftest files).

- :mod:`tests.support.timing`: the deadline scale factor, ``pause`` and the one ``wait_for``.
"""
