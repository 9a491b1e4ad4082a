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
