"""Text forms every detector reads alike: normalised text, word stems and their overlap."""
