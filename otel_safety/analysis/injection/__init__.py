"""Instructions planted in content: the rules, their scoring and the form features the
injection judge reads."""
