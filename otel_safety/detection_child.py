"""Entry point of the detection worker process: `python -m otel_safety.detection_child`.

Kept apart from `detection_worker` (which the package imports) so that running it as a
script does not import the same module twice.
"""

from otel_safety.detection_worker import main

if __name__ == "__main__":
    main()
