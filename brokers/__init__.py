"""Arrives in a later issue (see docs/)."""
