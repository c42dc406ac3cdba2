"""The timing and memory models: a step predicted from a profile and a link, labelled predicted."""
