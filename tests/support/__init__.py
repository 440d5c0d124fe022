"""What the tests share besides fixtures (those stay in the conftest files).

A test module imports helpers from here (or from a folder's helpers module, conftest or
tests/fakes), never from another test module: tests/unit/test_test_imports.py checks it.

- :mod:`tests.support.timing`: the deadline scale factor, ``pause`` and the one ``wait_for``.
- :mod:`tests.support.daemon`: a real daemon process, the real CLI, their environment.
- :mod:`tests.support.loop`: the e2e session helpers (FakeLLM environment, plans,
  ``trainee run``/``call``, waits on ``loop_get``, checks of the outputs).
- :mod:`tests.support.processes`: the training processes a project left behind.
- :mod:`tests.support.projects`: the tiny test projects' shared YAML files.
- :mod:`tests.support.extras`: skipping the tests of a missing optional extra.
- :mod:`tests.support.llm`: real litellm calls against FakeLLM (an event loop, prompt parts).
- :mod:`tests.support.mcp`: ``trainee mcp`` over stdio through the MCP SDK.
- :mod:`tests.support.webui`: the browser tests' helpers (tests/webui).
"""
