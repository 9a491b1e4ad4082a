"""The deep analysis's names, apart so the policies can read them without the tier."""

DETECTOR = "deep_analysis"

DIMENSIONS = (
    "authority_violation",
    "resource_abuse",
    "information_leak",
    "safety_bypass",
    "goal_misalignment",
    "social_engineering",
    "cascading_failure",
    "irreversible_action",
)

# Counters the tier keeps in the engine's stats (serve's /metrics shows them all).
COUNTERS = {
    "deep_candidates": "traces whose first verdict asked for a deep analysis",
    "deep_sampled_out": "candidates left out by the sampling rate",
    "deep_over_budget": "candidates left out by the per-minute trace budget",
    "deep_over_token_budget": "candidates left out by the per-minute token budget",
    "deep_queued": "traces queued for deep analysis",
    "deep_dropped": "candidates dropped because the deep analysis queue was full",
    "deep_analysed": "traces the model judged (a deep_analysis finding was written)",
    "deep_errors": "deep analyses that failed (request errors, unparseable replies)",
    "deep_raised": "traces whose level the deep analysis raised",
    "deep_calls": "requests the model answered",
    "deep_tokens": "model tokens spent (prompt and completion)",
    "deep_milliseconds": "time spent waiting for the model",
    "deep_sink_errors": "deep results a sink failed to write (logged)",
    "deep_unfinished_at_shutdown": "queued traces still unanalysed when shutdown stopped waiting",
}
