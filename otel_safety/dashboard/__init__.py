"""`otel-safety dashboard`: live web pages over the store (needs otel-safety[dashboard]).

Only `command` is imported by the CLI; the web stack loads when the dashboard starts.
"""
