"""Refusals, harm markers and the answer's substance, shared by the refusal, compliance and
jailbreak detectors and the behaviour monitors."""
