"""What the tests share: toy tasks and models, gradient checks, the command line in a subprocess,
the HTTP server in a thread, the headless browser, the MPI worker and the hostile-input case table.

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject.toml's ``[tool.pytest.ini_options]``;
a script run in a child process inserts it itself), and the tests import these modules as
``helpers.<module>``.
"""
