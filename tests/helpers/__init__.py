"""Helpers for the test suite only: planted memory cases and a seconds-fast Runner setup.

Tests import them as ``helpers.<module>`` (pytest puts ``tests/`` on ``sys.path``); importing
``helpers.memory_cases`` registers its planted datasets, so only the tests that ask get them.
"""
