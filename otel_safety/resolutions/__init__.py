"""Alerts marked resolved: who looked, when, and what they concluded."""
