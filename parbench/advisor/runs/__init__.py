"""A run's records beside their predictions: errors, memory calls, ranking, figures, files."""
