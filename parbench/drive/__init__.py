"""What runs a plan: the runner that measures each configuration in its trials, `verify`'s
step against the baseline's, and the largest-batch search. The plan never imports it."""
