"""One run in a fresh process: isolation and timeout, the child, the measured loop, samplers, environment."""
