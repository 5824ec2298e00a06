"""The engine every measuring command runs on: a policy's turns, one runner for a turn, events for whoever watches.

``engine.run(policy, events)`` asks the policy for a round of turns, runs each through the policy (which measures
or copies it with ``runner.run_one``: the environment, the skip reason and the cache asked in one place), measures
a run of a busy machine again once, and after every round lets the policy look and decide whether another comes.
What happens leaves as ``events.Event``s (started, progress, measured, cached, skipped, busy, already, looked,
decided, ...) that the console, the progress bar or any later sink consume; the display never drives a run.
"""
