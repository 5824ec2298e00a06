"""Ladders and their rungs: settings per rung, the cache of earlier measurements, failures."""
