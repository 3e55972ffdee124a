"""What the tests share: real-model assets, child-process environments, fake and scripted servers,
oracles, TUI helpers.  Imported as ``support.<module>`` (pyproject.toml puts ``tests/`` on the path;
pytest imports the test files themselves with ``--import-mode=importlib``)."""
