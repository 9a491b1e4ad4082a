"""Detector patterns as data: reading the data files, checking their shape, and indexing
patterns by the words they must start with, so that most never run on a text."""
