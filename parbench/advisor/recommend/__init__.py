"""Layouts on the devices at hand predicted and ranked into a recommendation."""
