"""Predictions: profiles of one device and timing models of every strategy, always labelled."""
