"""A run's record, made in one place and handed to every sink: the parquet store and its copies now, a tracker's
export or a live page as one more sink (``harness.records.sinks``)."""
