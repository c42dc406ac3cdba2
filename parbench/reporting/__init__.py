"""What a reader is told from a run's records: the table and answers printed after it, its
README and the index of runs, and the markdown they share."""
