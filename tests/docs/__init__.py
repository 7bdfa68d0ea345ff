"""Tests of the documentation: the tutorial runs as written, generated references are fresh."""
