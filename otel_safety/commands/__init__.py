"""The `otel-safety` command line: one module per command or command family.

Each module has `add_commands(sub)`, which registers its subparsers, and the handlers they
call; the feature packages hold the logic and know nothing of argparse. Options more than
one command takes (`--db`, `--detectors`, `--format`, `--workers`) are declared once, in
`options`, with defaults from the settings model (`otel_safety.config.Settings`).
"""
