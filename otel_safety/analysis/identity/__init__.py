"""Who a text claims to be or speak for: the lexicon and the assertions impersonation reads."""
