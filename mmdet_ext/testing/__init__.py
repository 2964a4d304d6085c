"""Test helpers that need no compiled code: synthetic data generators."""
