"""Measuring detectors on labelled data through the same pipeline as live traffic."""
